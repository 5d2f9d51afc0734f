"""The start-up trial of a GGUF model: a native crash is found before serving.

llama.cpp places some weights in "extra buffer types" at load time: CPU
kernels that repack weights for AMX (Intel Sapphire Rapids and later) or for
AVX2/AVX-512/NEON (``REPACK``). On some machines those kernels crash the
process at the first decode: a segfault in ``ggml_backend_amx_mul_mat``
(ggml-org/llama.cpp #20824, ollama/ollama #17006 and #17236), an illegal
instruction in llama-server's repack path. Inside ``missive serve`` that
would kill the server on a user's first request. Loading the model with the
model parameter ``use_extra_bufts = false`` (llama-server's ``--no-repack``)
avoids both.

With ``settings.extra_buffer_types = "auto"`` (the default),
:func:`choose_extra_buffer_types` therefore tries the model in a child
process before the server loads it (:func:`_trial_main`: load, decode a
32-token prompt, then 4 single tokens, the two kinds of matrix product a
request runs), with extra buffer types first, then, if the child was killed
by a signal or hung, without them. The configuration that worked is
recorded in the state directory (:data:`RECORD_FILE`), keyed by the
llama.cpp build, the CPU, the model file and ``n_gpu_layers``, so a later
start with the same four skips the trial. Nothing that works: a start-up
:class:`~missive.config.ConfigError` naming each signal.

``"on"`` and ``"off"`` choose without a trial.

:data:`CRASH_ENV` is a switch for the tests only: it makes chosen points
crash with a real segfault (a read of address 0), so the fallback and the
server's exit on a crash can be tested on any machine.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import json
import logging
import os
import platform
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from missive.api import ConfigError, read_json, state_dir, write_json

from .child import ChildOutcome, run_child
from .settings import LlamaCppSettings

__all__ = [
    "CRASH_ENV",
    "RECORD_FILE",
    "TRIAL_TIMEOUT",
    "BufferChoice",
    "choose_extra_buffer_types",
    "crash_point",
    "model_params",
]

log = logging.getLogger("missive.llamacpp")

#: The state file of trial outcomes (in :func:`missive.config.state_dir.state_dir`).
RECORD_FILE = "llamacpp-trials.json"
#: Seconds one trial child may take (loading a large model from a cold disk
#: included) before it is taken for hung.
TRIAL_TIMEOUT = 900.0
#: Tests only: comma-separated crash points, ``trial-on`` (the trial with extra
#: buffer types), ``trial-off`` (the trial without), ``decode`` (the model's
#: thread, before the first token of every request).
CRASH_ENV = "MISSIVE_LLAMACPP_TEST_CRASH"
#: Prompt tokens of the trial's batched decode.
TRIAL_PROMPT_TOKENS = 32
#: Single-token decodes after it.
TRIAL_STEPS = 4


@dataclass(frozen=True)
class BufferChoice:
    """Whether the model is loaded with extra buffer types, and why.

    Attributes:
        use_extra_bufts: llama.cpp's model parameter ``use_extra_bufts``.
        why: how it was chosen, for the start-up log line.
    """

    use_extra_bufts: bool
    why: str

    def describe(self) -> str:
        """``extra_buffer_types=on (auto: ...)``, as the start-up log shows it."""
        return f"extra_buffer_types={'on' if self.use_extra_bufts else 'off'} ({self.why})"


def crash_point(name: str) -> None:
    """Crash this process with a real segfault when :data:`CRASH_ENV` names
    ``name``. Tests only; without the variable, a dictionary look-up."""
    points = os.environ.get(CRASH_ENV)
    if points and name in points.split(","):
        ctypes.string_at(0)  # reads address 0: SIGSEGV, as a crashing llama.cpp kernel


_PARAMS_LOCK = threading.Lock()


@contextlib.contextmanager
def model_params(**fields: Any) -> Iterator[None]:
    """Make ``llama_cpp.Llama(...)`` built inside the block load its model
    with these ``llama_model_params`` fields (``use_extra_bufts=False``).

    llama-cpp-python 0.3.x's ``Llama`` takes no argument for them: it fills
    ``llama_model_params`` from ``llama_model_default_params()`` and loads the
    model in its constructor. The block replaces that function with one that
    sets ``fields`` on its result; a lock keeps two loads in two threads from
    seeing each other's fields (loads are serialised while it is held).
    """
    import llama_cpp.llama_cpp as low

    with _PARAMS_LOCK:
        original = low.llama_model_default_params

        def patched() -> Any:
            params = original()
            for name, value in fields.items():
                setattr(params, name, value)
            return params

        low.llama_model_default_params = patched
        try:
            yield
        finally:
            low.llama_model_default_params = original


def choose_extra_buffer_types(settings: LlamaCppSettings, model_id: str) -> BufferChoice:
    """Decide ``use_extra_bufts`` for a model (see the module doc). Blocking:
    run it in a worker thread. Costs nothing with ``"on"``/``"off"`` or a
    record; else one or two child processes that load the model and decode
    36 tokens (about a second each for SmolLM2-135M on 2 cores).

    Raises:
        ConfigError: the model crashed llama.cpp in both configurations.
    """
    mode = settings.extra_buffer_types
    if mode != "auto":
        return BufferChoice(mode == "on", "set by settings.extra_buffer_types")
    key = _record_key(settings)
    records = read_json(RECORD_FILE)
    record = records.get(key)
    if isinstance(record, dict) and record.get("extra_buffer_types") in ("on", "off"):
        return BufferChoice(
            record["extra_buffer_types"] == "on",
            f"auto: {record.get('why', 'trial')}, recorded {record.get('at', '?')} in "
            f"{state_dir() / RECORD_FILE}",
        )
    failures: list[tuple[str, ChildOutcome]] = []
    for use in (True, False):
        label = "on" if use else "off"
        outcome = _run_trial(settings, use)
        if outcome.ok:
            if failures:
                why = "; ".join(
                    f"the trial with extra_buffer_types={lab} was {o.reason()}" for lab, o in failures
                )
                log.warning(
                    "model %s: llama.cpp crashed with extra buffer types on this machine (%s); serving "
                    "without "
                    "them. Known upstream (ggml-org/llama.cpp #20824); set settings.extra_buffer_types to "
                    "choose without a trial. CPU features: %s",
                    model_id,
                    why,
                    _cpu_features(),
                )
                why = f"auto: {why}; the trial without them passed"
            else:
                why = f"auto: the trial passed in {outcome.seconds:.1f} s"
            _store(records, key, label, why.removeprefix("auto: "), settings)
            return BufferChoice(use, why)
        if not outcome.crashed:
            # A Python-level failure (the file does not load...): the same in
            # both configurations; the in-process load reports it in its words.
            log.debug("model %s: trial failed without crashing: %s", model_id, outcome.reason())
            return BufferChoice(use, f"auto: the trial failed without crashing ({outcome.reason()})")
        failures.append((label, outcome))
    detail = "; ".join(f"with extra_buffer_types={label}: {o.reason()}" for label, o in failures)
    raise ConfigError(
        f"model '{model_id}': llama.cpp crashed loading or decoding {settings.path} on this machine in every "
        f"configuration ({detail}); the model file may be damaged, or this llama.cpp build may not support "
        f"this CPU ({_cpu_features()})"
    )


def _run_trial(settings: LlamaCppSettings, use_extra_bufts: bool) -> ChildOutcome:
    spec = {
        "model_path": str(settings.path),
        "use_extra_bufts": use_extra_bufts,
        "n_threads": settings.threads,
        "n_gpu_layers": settings.gpu_layers,
    }
    try:
        return run_child("missive_llamacpp.trial", [json.dumps(spec)], timeout=TRIAL_TIMEOUT)
    except OSError as exc:
        raise ConfigError(f"cannot start the trial process for {settings.path}: {exc}") from exc


def _store(records: dict[str, Any], key: str, label: str, why: str, settings: LlamaCppSettings) -> None:
    records[key] = {
        "extra_buffer_types": label,
        "why": why,
        "at": datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        "model": str(settings.path),
        "n_gpu_layers": settings.gpu_layers,
    }
    write_json(RECORD_FILE, records)


def _record_key(settings: LlamaCppSettings) -> str:
    """What a trial's outcome depends on, hashed: the llama.cpp build (its
    version and shared libraries), the CPU (model, flags, ggml's features),
    the model file (path, size, modification time) and ``n_gpu_layers``."""
    import llama_cpp

    parts: list[str] = [str(getattr(llama_cpp, "__version__", "?")), platform.machine()]
    lib_dir = Path(llama_cpp.__file__).parent / "lib"
    with contextlib.suppress(OSError):
        for lib in sorted(lib_dir.iterdir()):
            stat = lib.stat()
            parts.append(f"{lib.name}:{stat.st_size}:{stat.st_mtime_ns}")
    parts.append(_cpuinfo())
    parts.append(_cpu_features())
    path = settings.path.resolve()
    try:
        stat = path.stat()
        parts.append(f"{path}:{stat.st_size}:{stat.st_mtime_ns}")
    except OSError:
        parts.append(str(path))
    parts.append(f"n_gpu_layers={settings.gpu_layers}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _cpuinfo() -> str:
    """The first processor's model name and flags from ``/proc/cpuinfo``
    ("" where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.processor()
    wanted = ("vendor_id", "model name", "cpu family", "model", "stepping", "flags", "Features", "CPU part")
    seen: dict[str, str] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip()
        if name in wanted and name not in seen:
            seen[name] = value.strip()
    return "; ".join(f"{k}={v}" for k, v in seen.items())


def _cpu_features() -> str:
    """ggml's CPU features (``llama_print_system_info``), e.g.
    ``SSE3 = 1 | ... | AMX_INT8 = 1 | REPACK = 1``."""
    import llama_cpp

    try:
        info = str(llama_cpp.llama_print_system_info().decode(errors="replace")).strip()
    except Exception:  # noqa: BLE001 - only a log and key detail
        return "unknown"
    return info.removeprefix("CPU :").strip(" |")


def _trial_main(spec_json: str) -> int:
    """The trial child: load the model as specified, decode a batch and a few
    single tokens. Exit status 0 when llama.cpp survived; a crash kills it."""
    spec = json.loads(spec_json)
    import llama_cpp

    label = "on" if spec["use_extra_bufts"] else "off"
    with model_params(use_extra_bufts=bool(spec["use_extra_bufts"])):
        llm = llama_cpp.Llama(
            model_path=spec["model_path"],
            n_ctx=256,
            n_batch=64,
            n_threads=spec["n_threads"],
            n_threads_batch=spec["n_threads"],
            n_gpu_layers=spec["n_gpu_layers"],
            verbose=False,
        )
    prompt = llm.tokenize(b"The quick brown fox jumps over the lazy dog. " * 8, add_bos=True)[
        :TRIAL_PROMPT_TOKENS
    ]
    crash_point(f"trial-{label}")
    llm.eval(prompt)
    token = prompt[-1]
    for _ in range(TRIAL_STEPS):
        llm.eval([token])
    llm.close()
    return 0


if __name__ == "__main__":  # the child of _run_trial
    start = time.monotonic()
    code = _trial_main(sys.argv[1])
    print(f"probe: trial passed in {time.monotonic() - start:.2f} s", file=sys.stderr)
    sys.exit(code)
