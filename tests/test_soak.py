"""A short soak (benchmarks/bench_soak.py): 16 streaming clients for 15 s.

The benchmark's own ``--check`` limits apply: no answer fails, the server's
open descriptors end where they started (4 of slack), no socket is left in
CLOSE-WAIT, resident memory grows by at most 20 % after the warm-up. Before
connections closed by their clients were closed at once
(:mod:`missive.server.connections`), 15 s of this left some 300 sockets in
CLOSE-WAIT. The full run (64 clients, 600 s) is the benchmark's.
"""

from __future__ import annotations

import sys

import pytest
from bench_modules import load_bench

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_short_soak_stays_flat() -> None:
    """16 clients stream 64-token echo answers for 15 s, reconnecting every 10
    answers and leaving every 25th mid-stream: every answer read to its end
    is complete, and the server's descriptors, CLOSE-WAIT sockets and memory
    pass the benchmark's --check."""
    bench = load_bench("bench_soak")
    args = bench.parse_args(["--seconds", "15", "--clients", "16", "--warmup", "5", "--report-every", "0"])
    result = bench.run_soak(args)
    assert result.streams > 100, result
    assert result.problems() == [], result
