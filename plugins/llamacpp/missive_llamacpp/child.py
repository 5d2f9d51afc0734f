"""Running llama.cpp in a child process, where its crashes cannot hurt.

llama.cpp does not report many failures as errors: a malformed file trips a
``GGML_ASSERT`` (abort, SIGABRT), a CPU kernel segfaults (SIGSEGV: the AMX
matrix multiply, ggml-org/llama.cpp #20824) or executes an instruction the
CPU lacks (SIGILL). Inside ``missive serve`` each of these ends the whole
server. The driver therefore tries risky things first in a child Python
process (:mod:`missive_llamacpp.trial` for the model,
:func:`missive_llamacpp.vision.probe_projector` for a projector) and reads
the outcome here.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

__all__ = ["ChildOutcome", "run_child"]


@dataclass(frozen=True)
class ChildOutcome:
    """How a child process ended.

    Attributes:
        returncode: its exit status; negative: killed by that signal
            (``subprocess`` convention); None: it ran past its time and was killed.
        stderr: what it wrote to stderr (llama.cpp's assertion, the child's
            ``probe:`` lines).
        seconds: wall-clock time it took.
    """

    returncode: int | None
    stderr: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def signal_name(self) -> str | None:
        """``"SIGSEGV"``... when a signal killed it, else None."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def crashed(self) -> bool:
        """Killed by a signal (a native crash: segfault, abort, illegal
        instruction...) or hung past its time: what a retry in a safer
        configuration may avoid. A plain non-zero exit is a Python error the
        in-process load would report as well."""
        return self.returncode is None or self.returncode < 0

    def reason(self) -> str:
        """One line saying how it ended: the signal and llama.cpp's own line
        about it (``killed by SIGABRT: ggml.c:3758: GGML_ASSERT(...) failed``),
        or for a plain exit the child's last ``probe:`` line (its status when
        it wrote none)."""
        line = _reason_line(self.stderr)
        if self.returncode is None:
            head = f"it ran past its time limit ({self.seconds:.0f} s)"
        elif self.signal_name is not None:
            head = f"killed by {self.signal_name}"
        else:
            return line or f"exit status {self.returncode}"
        return f"{head}: {line}" if line else head


def run_child(
    module: str, args: list[str], *, timeout: float, env: dict[str, str] | None = None
) -> ChildOutcome:
    """Run ``python -m module *args`` with this interpreter; wait at most
    ``timeout`` seconds (then kill it). Never raises for how the child ends;
    ``OSError`` if it cannot be started at all."""
    command = [sys.executable, "-m", module, *args]
    began = time.monotonic()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, errors="replace", timeout=timeout, env=env
        )
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return ChildOutcome(None, stderr, time.monotonic() - began)
    return ChildOutcome(done.returncode, done.stderr, time.monotonic() - began)


def _reason_line(stderr: str) -> str:
    """The line of a child's output that says what went wrong, "" if none."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for marker in ("probe:", "GGML_ASSERT", "GGML_ABORT", "Fatal Python error", "error", "failed"):
        found = [line for line in lines if marker in line]
        if found:
            line = found[-1] if marker == "probe:" else found[0]
            # "/tmp/pip-.../ggml/src/ggml.c:3758: GGML_ASSERT(...)" -> "ggml.c:3758: GGML_ASSERT(...)"
            return re.sub(r"^\S*/(?=[^/\s]+:\d+:)", "", line.removeprefix("probe: "))
    return ""
