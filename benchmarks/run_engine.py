"""Every ratio of the embedded engine's targets, in one run: one command, one table.

Runs the engine benchmarks one after another (never two at once: each
compares Missive with a baseline on the same CPUs), each in its own process
with its output in ``--out``, and prints every ratio they record
(:mod:`ratios`) with its target, the machine they ran on and the load
average around each one (a figure measured while other work ran is marked).

    .venv/bin/python benchmarks/run_engine.py            # the full run (about 1.5 h on 2 cores)
    .venv/bin/python benchmarks/run_engine.py --quick    # short prompts, one repeat (about 20 min)
    .venv/bin/python benchmarks/run_engine.py --only prompt_read slots

The measures (issues 28 and 31): prompt read against llama-server on a
prompt filling most of SmolLM2's window and on ~12,500 tokens with Gemma 3
270M; speculative decoding on an edit task and on free prose, 1 and 4
streams; Claude Code's first request after a restart (disk tier) against a
warm in-memory hit; 4 concurrent streams against ``llama-server --parallel
4``; single-stream decode against llama-cpp-python direct; later-turn time
to first token with side requests between turns against the turns alone;
a Codex turn (``/v1/responses``) after a Claude Code turn on the same prefix
against a cold one, and the reverse (issue 44). A benchmark whose script is missing is listed as such.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ratios import RATIOS_ENV, met, read

HERE = Path(__file__).resolve().parent

#: A 1-minute load average above this when a benchmark starts marks its figures as not quiet.
QUIET_LOAD = 0.7


@dataclass(frozen=True)
class Step:
    """One benchmark run: its name, script, and arguments for a full and a quick run."""

    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]


STEPS = (
    Step(
        "prompt_read",
        "bench_prompt_read.py",
        ("--model", "smollm2", "--prompt-tokens", "6800", "--repeats", "3"),
        ("--model", "smollm2", "--prompt-tokens", "1500", "--repeats", "1"),
    ),
    Step(
        "prompt_read_gemma3",
        "bench_prompt_read.py",
        ("--model", "gemma3", "--prompt-tokens", "12500", "--repeats", "1", "--flash-attn", "on"),
        ("--model", "gemma3", "--prompt-tokens", "1500", "--repeats", "1"),
    ),
    Step("speculative", "bench_speculative.py", (), ("--quick",)),
    Step("draft", "bench_draft.py", ("--repeats", "3", "--lines", "40"), ("--repeats", "1", "--lines", "20")),
    Step("disk_cache", "bench_disk_cache.py", (), ("--prompt-tokens", "2000")),
    Step(
        "slots",
        "bench_slots.py",
        ("--parallel", "4", "--repeats", "3"),
        ("--parallel", "4", "--repeats", "1"),
    ),
    Step("decode", "bench_llamacpp.py", ("--runs", "5"), ("--runs", "2")),
    Step("prompt_cache", "bench_prompt_cache.py", (), ("--system-tokens", "800", "--turns", "3")),
    Step("shared_cache", "bench_shared_cache.py", ("--repeats", "3"), ("--repeats", "1", "--tools", "Bash")),
    Step(
        "prompt_cache_hybrid",
        "bench_prompt_cache.py",
        ("--model", "hybrid"),
        ("--model", "hybrid", "--system-tokens", "800", "--turns", "3"),
    ),
)


def machine() -> str:
    """CPU model, cores, the instruction sets that change llama.cpp's kernels, memory."""
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    isa = [name for name in ("avx2", "avx512f", "amx_tile") if name in flags]
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{model}, {os.cpu_count()} cores, {' '.join(isa) or 'no AVX2'}, {memory:.0f} GiB RAM"


def settle(limit: float) -> None:
    """Wait (at most ``limit`` seconds) for the 1-minute load average to fall
    to :data:`QUIET_LOAD`: the previous benchmark's own work lifts it for a
    minute or two after it ends, and a step must not start on that."""
    deadline = time.monotonic() + limit
    load = os.getloadavg()[0]
    if load > QUIET_LOAD and limit > 0:
        print(f"  waiting for the load average ({load:.1f}) to fall to {QUIET_LOAD}...", flush=True)
    while load > QUIET_LOAD and time.monotonic() < deadline:
        time.sleep(5)
        load = os.getloadavg()[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short prompts and one repeat each")
    parser.add_argument(
        "--only", nargs="+", choices=[s.name for s in STEPS], help="run these benchmarks only"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="folder for each benchmark's output (default: a temp folder)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    parser.add_argument(
        "--settle",
        type=float,
        default=300.0,
        help="seconds to wait at most, before each benchmark, for the load average to fall to "
        f"{QUIET_LOAD} (0: do not wait)",
    )
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="missive-bench-"))
    out.mkdir(parents=True, exist_ok=True)
    steps = [s for s in STEPS if not args.only or s.name in args.only]
    print(f"machine: {machine()}\noutput: {out}\n", flush=True)
    loads: dict[str, tuple[float, float]] = {}
    outcomes: dict[str, str] = {}
    for step in steps:
        script = HERE / step.script
        if not script.is_file():
            outcomes[step.name] = "not written yet"
            continue
        cmd = [sys.executable, str(script), *(step.quick if args.quick else step.full)]
        settle(args.settle)
        start_load, started = os.getloadavg()[0], time.monotonic()
        print(f"{step.name}: {' '.join(cmd[1:])} (load {start_load:.1f})...", flush=True)
        ratios_file = out / f"{step.name}.ratios.jsonl"
        ratios_file.unlink(missing_ok=True)
        with open(out / f"{step.name}.log", "w", encoding="utf-8") as log:
            rc = subprocess.call(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=HERE.parent,
                env={**os.environ, RATIOS_ENV: str(ratios_file), "PYTHONUNBUFFERED": "1"},
            )
        loads[step.name] = (start_load, os.getloadavg()[0])
        outcomes[step.name] = f"exit {rc} after {time.monotonic() - started:.0f} s" + (
            "" if rc == 0 else f", see {out / step.name}.log"
        )
        print(f"  {outcomes[step.name]}", flush=True)

    print(f"\nmachine: {machine()}{' (quick run)' if args.quick else ''}")
    print(f"{'benchmark':22}{'measure':78}{'value':>8}{'target':>9}  met")
    missed = 0
    for step in steps:
        for r in read(out / f"{step.name}.ratios.jsonl"):
            ok = met(r.value, r.target)
            missed += ok is False
            print(
                f"{step.name:22}{r.name[:77]:78}{r.value:8.2f}{r.target:>9}  "
                f"{'-' if ok is None else 'yes' if ok else 'NO'}"
            )
    print()
    for name, outcome in outcomes.items():
        before, after = loads.get(name, (0.0, 0.0))
        quiet = (
            ""
            if name not in loads
            else f"; load {before:.1f} -> {after:.1f}"
            + ("" if before <= QUIET_LOAD else " (NOT QUIET: other work was running)")
        )
        print(f"{name:22}{outcome}{quiet}")
    if args.check and (
        missed or any(not o.startswith("exit 0") for o in outcomes.values() if o != "not written yet")
    ):
        sys.exit(1)


if __name__ == "__main__":
    main()
