"""A flood of 10,000 requests with wrong API keys (issue 32;
benchmarks/bench_bad_keys.py, whose checks apply): every one is answered
401 ``authentication_error`` in the API's envelope, none starts model work,
none leaves a key series in ``/metrics`` or its key in the log, and the
server's resident memory grows by less than 64 MiB (a generous bound; the
benchmark's figures are in benchmarks/README.md). No time is asserted.
"""

from __future__ import annotations

import sys

import pytest
from bench_modules import load_bench

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_ten_thousand_bad_keys_are_answered_cheaply() -> None:
    bench = load_bench("bench_bad_keys")
    args = bench.parse_args(["--requests", "10000", "--warmup", "300", "--baseline", "0", "--keys", "20"])
    result = bench.run_flood(args)
    assert result.statuses == {"401": 10_000}, result
    assert result.problems(rss_slack=64.0) == [], result
