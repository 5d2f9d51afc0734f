"""A flood of 10,000 requests with wrong API keys (issue 32;
benchmarks/bench_bad_keys.py, whose checks apply): every one is answered
401 ``authentication_error`` in the API's envelope, none starts model work,
none leaves a key series in ``/metrics`` or its key in the log, and the
server's resident memory grows by less than 64 MiB (a generous bound; the
benchmark's figures are in benchmarks/README.md). No time is asserted.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

BENCH = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_bad_keys.py"


def load_bench() -> object:
    spec = importlib.util.spec_from_file_location("bench_bad_keys", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_ten_thousand_bad_keys_are_answered_cheaply() -> None:
    bench = load_bench()
    args = bench.parse_args(["--requests", "10000", "--warmup", "300", "--baseline", "0", "--keys", "20"])
    result = bench.run_flood(args)
    assert result.statuses == {"401": 10_000}, result
    assert result.problems(rss_slack=64.0) == [], result
