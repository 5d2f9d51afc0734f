"""The console's memory (core/missive/console/history.py) on its own, with
records built by hand and a clock the test sets: the ring of recent
requests, the buckets of the last hour and their quantiles."""

from __future__ import annotations

from typing import Any

import pytest

from missive.console.history import (
    BUCKET_SECONDS,
    IGNORED_CHARS,
    IGNORED_ITEMS,
    PATH_CHARS,
    TTFT_SAMPLES,
    History,
    RecentRequests,
    Series,
    quantile,
)
from missive.serving.record import RequestRecord

T0 = 1_800_000_000.0  # a bucket boundary (divisible by 10)


def record(
    model: str = "m",
    *,
    path: str = "/v1/messages",
    ttft: float | None = 0.5,
    error: str | None = None,
    usage: tuple[int, int, int, int] | None = (10, 30, 0, 5),
    ignored: tuple[str, ...] = (),
) -> RequestRecord:
    """A finished record as a request to ``model`` leaves it."""
    rec = RequestRecord("req_" + "x" * 24, "POST", path, path, lambda r: None)
    rec.model = model
    if usage is not None:
        rec.note(
            {
                "type": "message_start",
                "message": {
                    "usage": {
                        "input_tokens": usage[0],
                        "cache_read_input_tokens": usage[1],
                        "cache_creation_input_tokens": usage[2],
                        "output_tokens": 0,
                    }
                },
            }
        )
        rec.note(
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn"},
                "usage": {"output_tokens": usage[3]},
            }
        )
    if ttft is not None:
        rec.first_token_at = rec.started + ttft
    rec.ignored = list(ignored)
    rec.finish(400 if error else 200, error)
    return rec


def test_quantile_interpolates_between_ranks() -> None:
    assert quantile([], 0.5) is None
    assert quantile([3.0], 0.95) == 3.0
    assert quantile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.5
    assert quantile([float(i) for i in range(101)], 0.95) == pytest.approx(95.0)


def test_ring_keeps_the_newest_and_finds_by_id() -> None:
    ring = RecentRequests(size=3)
    entries = []
    for i in range(5):
        rec = record(f"m{i}", ignored=("x",) if i == 4 else ())
        rec.request_id = f"req_{i}"
        entries.append(ring.add(rec, T0 + i))
    assert len(ring) == 3
    assert [e["model"] for e in ring.select(lambda e: True, 10)] == ["m4", "m3", "m2"]
    assert ring.find("req_0") is None
    found = ring.find("req_4")
    assert found is not None and found[0]["ignored"] == ["x"] and found[0]["seq"] == 5
    assert [e["seq"] for e in ring.select(lambda e: True, 10, before=5)] == [4, 3]
    assert ring.values("model") == ["m2", "m3", "m4"]
    assert entries[0]["time"] == pytest.approx(T0 - (entries[0]["duration_s"] or 0), abs=0.01)


def test_buckets_count_per_model_and_roll_over_the_window() -> None:
    series = Series(width=BUCKET_SECONDS, window=60)  # 6 buckets
    series.observe(record("a", usage=(10, 30, 0, 5)), T0)
    series.observe(record("a", usage=(20, 0, 0, 7), error="api_error"), T0 + 3)
    series.observe(record("b", usage=None, ttft=None), T0 + 12)
    series.sample([("a", 2, 1), ("b", 0, 0)], T0 + 4)
    series.sample([("a", 1, 3)], T0 + 5)
    points = series.points("a", T0 + 15)
    assert len(points) == 6 and points[-2]["t"] == T0 and points[-1]["t"] == T0 + 10
    first = points[-2]
    assert first["requests_per_s"] == pytest.approx(2 / 10) and first["errors_per_s"] == pytest.approx(1 / 10)
    assert first["input_tokens_per_s"] == pytest.approx(60 / 10) and first[
        "output_tokens_per_s"
    ] == pytest.approx(1.2)
    assert first["cache_hit_ratio"] == pytest.approx(0.5)
    assert first["waiting_max"] == 2 and first["running_max"] == 3
    assert (
        points[-1]["requests_per_s"] == 0
        and points[-1]["cache_hit_ratio"] is None
        and points[-1]["waiting_max"] is None
    )
    both = series.points(None, T0 + 15)
    assert both[-1]["requests_per_s"] == pytest.approx(0.1)  # b's request, no usage
    # All models' load: the sums at each sample, their maximum over the interval.
    assert both[-2]["waiting_max"] == 2 and both[-2]["running_max"] == 3
    assert series.models() == ["a", "b"]
    # Past the window (an hour; here a minute) the old buckets are gone.
    series.observe(record("a"), T0 + 200)
    assert all(p["t"] > T0 for p in series.points("a", T0 + 200) if p["requests_per_s"])
    assert len(series._models["a"]) <= series.count


def test_ttft_quantiles_from_a_bounded_sample() -> None:
    series = Series(width=BUCKET_SECONDS, window=60)
    for i in range(TTFT_SAMPLES * 3):
        series.observe(record("a", ttft=(i % 100) / 100), T0 + 1)
    bucket = series._models["a"][-1]
    assert len(bucket.ttft) == TTFT_SAMPLES and bucket.ttft_seen == TTFT_SAMPLES * 3
    point = series.points("a", T0 + 1)[-1]
    assert 0.35 <= point["ttft_p50_s"] <= 0.65 and 0.85 <= point["ttft_p95_s"] <= 0.99


def test_history_leaves_quiet_requests_out() -> None:
    now = [T0]
    history = History(clock=lambda: now[0])
    for path in ("/health", "/metrics", "/console/api/status", "/console/"):
        history.observe(record(path=path))
    assert len(history.recent) == 0 and history.series.models() == []
    history.observe(record("m"))
    entry: dict[str, Any] = history.recent.select(lambda e: True, 1)[0]
    assert entry["model"] == "m" and entry["status"] == 200 and entry["stop_reason"] == "end_turn"
    assert history.series.points("m", now[0])[-1]["requests_per_s"] == pytest.approx(0.1)


def test_client_text_is_kept_short() -> None:
    """A path or an ignored list of any size costs the ring a bounded entry."""
    rec = record(path="/v1/" + "p" * 10_000, ignored=tuple(f"field_{i}_" + "x" * 1000 for i in range(5000)))
    entry = RecentRequests().add(rec, T0)
    assert len(entry["path"]) == PATH_CHARS
    assert len(entry["ignored"]) == IGNORED_ITEMS + 1 and entry["ignored"][-1] == "... (5000 in all)"
    assert all(len(item) <= IGNORED_CHARS for item in entry["ignored"])
