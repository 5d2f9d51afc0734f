"""benchmarks/run_engine.py: every recorded ratio reaches its table, a missed target fails ``--check``.

The real benchmarks take minutes to hours; here each step is a small script
that records ratios the way they do (:mod:`ratios`, through the file the
runner names in the environment).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from bench_modules import load_bench

SCRIPT = """
import json, os
with open(os.environ["MISSIVE_BENCH_RATIOS"], "a") as out:
    row = {{"bench": "fake", "name": {name!r}, "value": {value}, "target": {target!r}}}
    out.write(json.dumps(row) + "\\n")
"""


def fake_step(run_engine, tmp_path: Path, name: str, value: float, target: str):
    script = tmp_path / f"{name}.py"
    script.write_text(SCRIPT.format(name=f"{name} ratio", value=value, target=target))
    return run_engine.Step(name, str(script), (), ())  # an absolute path wins over benchmarks/


def run(run_engine, monkeypatch: pytest.MonkeyPatch, steps, *args: str) -> None:
    monkeypatch.setattr(run_engine, "STEPS", tuple(steps))
    monkeypatch.setattr(
        sys, "argv", ["run_engine.py", "--settle", "0", *args]
    )  # the suite keeps the CPUs busy
    run_engine.main()


def test_ratios_of_every_step_are_printed_with_their_targets(tmp_path: Path, monkeypatch, capsys) -> None:
    load_bench("ratios")
    run_engine = load_bench("run_engine")
    steps = [
        fake_step(run_engine, tmp_path, "first", 1.25, ">= 1.0"),
        fake_step(run_engine, tmp_path, "second", 1.4, "<= 1.3"),
        run_engine.Step("unwritten", "bench_that_does_not_exist.py", (), ()),
    ]
    run(run_engine, monkeypatch, steps, "--out", str(tmp_path / "out"))
    out = capsys.readouterr().out
    rows = {
        line.split()[0]: line
        for line in out.splitlines()
        if line.startswith(("first ", "second ")) and " ratio " in line
    }
    assert (
        "first ratio" in rows["first"] and "1.25" in rows["first"] and rows["first"].rstrip().endswith("yes")
    )
    assert "1.40" in rows["second"] and rows["second"].rstrip().endswith("NO")
    assert "not written yet" in out
    assert (tmp_path / "out" / "first.log").is_file()


def test_check_exits_1_on_a_missed_target_only(tmp_path: Path, monkeypatch) -> None:
    load_bench("ratios")
    run_engine = load_bench("run_engine")
    run(
        run_engine,
        monkeypatch,
        [fake_step(run_engine, tmp_path, "good", 1.1, ">= 1.0")],
        "--check",
        "--out",
        str(tmp_path / "a"),
    )
    with pytest.raises(SystemExit) as exc:
        run(
            run_engine,
            monkeypatch,
            [fake_step(run_engine, tmp_path, "bad", 0.8, ">= 1.0")],
            "--check",
            "--out",
            str(tmp_path / "b"),
        )
    assert exc.value.code == 1


def test_every_step_names_a_benchmark_script() -> None:
    load_bench("ratios")
    run_engine = load_bench("run_engine")
    here = Path(run_engine.__file__).parent
    scripts = {step.script for step in run_engine.STEPS}
    missing = {s for s in scripts if not (here / s).is_file()}
    assert not missing


def test_each_step_waits_for_the_load_to_fall(monkeypatch) -> None:
    """settle: sleeps while the 1-minute load average is above QUIET_LOAD,
    returns once it falls, and gives up at its limit."""
    load_bench("ratios")
    run_engine = load_bench("run_engine")
    loads = iter([2.0, 2.0, 1.2, 0.5])
    naps: list[float] = []
    monkeypatch.setattr(run_engine.os, "getloadavg", lambda: (next(loads), 0.0, 0.0))
    monkeypatch.setattr(run_engine.time, "sleep", naps.append)
    run_engine.settle(300)
    assert naps == [5, 5, 5]  # 2.0, 2.0 and 1.2 waited for; 0.5 started
    monkeypatch.setattr(run_engine.os, "getloadavg", lambda: (3.0, 0.0, 0.0))
    clock = iter(range(0, 1000, 100))
    monkeypatch.setattr(run_engine.time, "monotonic", lambda: float(next(clock)))
    naps.clear()
    run_engine.settle(250)  # busy for good: gives up after the limit
    assert 1 <= len(naps) <= 3
