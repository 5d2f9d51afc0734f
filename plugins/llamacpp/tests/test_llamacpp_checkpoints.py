"""Prompt reuse on hybrid and sliding-window models, on the runner and its rules.

Tiny random-weight models written by :mod:`missive_llamacpp.testing_hybrid`
(LFM2: short convolutions + attention, a hybrid; Gemma 3: sliding-window
attention) are loaded for real, and the runner is driven as the engine
drives it (``begin``, ``step_many``, ``end``), with two slots of one
unified pool:

* the next turn of a conversation (the cached tokens are a prefix of the
  prompt) is reused whole, with nothing cut, on the hybrid model;
* a prompt that parts from the cached one restores the nearest checkpoint
  before the parting (the hybrid) or cuts inside the window still held
  (sliding window), and its greedy tokens are those of a fresh decode in an
  empty slot (up to llama.cpp's rounding: two answers may part only at a
  near tie, :func:`greedy_reference.assert_same_greedy_tokens`);
* a slot's state saved to host memory takes its checkpoints along, and a
  restore into another slot serves the same reuse;

plus the pure rules (:func:`~missive_llamacpp.checkpoints.plan_reuse`,
checkpoint positions, bounds) without a model.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from greedy_reference import assert_same_greedy_tokens

from missive.api import PENDING, Prompt, Sampling, Sequence
from missive_llamacpp.checkpoints import Checkpoint, keep, plan_reuse, positions

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")

N_SWA = 128


def ck(n: int, size: int = 10) -> Checkpoint:
    return Checkpoint(n, None, size)


# -- the rules -----------------------------------------------------------------


def test_plan_reuse_by_kind_of_model() -> None:
    cached = list(range(100))
    # The next turn: the cache is a prefix of the prompt; nothing to cut, whatever the model.
    for cut in ("any", "window", "none"):
        assert plan_reuse(cached, [*cached, 7, 8], cut=cut) == (100, None)  # type: ignore[arg-type]
    parted = [*range(60), 999, 1000]
    assert plan_reuse(cached, parted, cut="any") == (60, None)
    # A recurrent state cannot be cut: the nearest checkpoint at or before the parting.
    points = [ck(16), ck(32), ck(64)]
    assert plan_reuse(cached, parted, cut="none", checkpoints=points) == (32, points[1])
    assert plan_reuse(cached, parted, cut="none") == (0, None)
    # A window cut is exact while the window before it is still held.
    assert plan_reuse(cached, parted, cut="window", n_swa=20, pos_min=40) == (60, None)
    assert plan_reuse(cached, parted, cut="window", n_swa=20, pos_min=41, checkpoints=points) == (
        32,
        points[1],
    )
    # The same prompt again: its last token is decoded again, so a cut is needed.
    assert plan_reuse(cached, cached, cut="none", checkpoints=points) == (64, points[2])
    assert plan_reuse(cached, cached, cut="any") == (99, None)
    # An image whole or not at all: the clip moves the reuse back first.
    assert plan_reuse(cached, parted, cut="none", checkpoints=points, clip=lambda n: min(n, 20)) == (
        16,
        points[0],
    )


def test_checkpoint_positions_and_bounds() -> None:
    assert positions(1000, 0, interval=256, n_ubatch=100) == [256, 512, 768, 896, 996]
    assert positions(1000, 600, interval=256, n_ubatch=512) == [768, 996]
    assert positions(1000, 0, interval=4096, n_ubatch=512, avoid=[(990, 998)]) == [484]
    kept: list[Checkpoint] = []
    for n in (10, 20, 30, 20):
        kept = keep(kept, ck(n), count=3, nbytes=100)
    assert [c.n_tokens for c in kept] == [10, 20, 30]
    kept = keep(kept, ck(40), count=3, nbytes=100)
    assert [c.n_tokens for c in kept] == [20, 30, 40]  # the oldest dropped
    kept = keep(kept, ck(50, size=80), count=3, nbytes=95)
    assert [c.n_tokens for c in kept] == [40, 50]  # and within the bytes


# -- a real runner ---------------------------------------------------------------


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from missive_llamacpp.testing_hybrid import write_tiny

    folder = tmp_path_factory.mktemp("tiny")
    return {arch: write_tiny(folder / f"{arch}.gguf", arch, n_swa=N_SWA) for arch in ("lfm2", "gemma3")}  # type: ignore[arg-type]


@pytest.fixture(scope="module", params=["lfm2", "gemma3"])
def runner(request: pytest.FixtureRequest, models: dict[str, Path]) -> Iterator[Any]:
    from missive_llamacpp.runner import LlamaCppRunner
    from missive_llamacpp.settings import parse_settings

    settings = parse_settings(
        "tiny", {"model_path": str(models[request.param]), "parallel": 2, "checkpoint_interval": 256}
    )
    runner = LlamaCppRunner("tiny", settings, 4096)
    runner.load()
    runner.path = str(models[request.param])  # for the greedy reference
    yield runner
    runner.close()


def run(runner: Any, tokens: list[int], slot: int, *, n: int = 8) -> tuple[int, list[int]]:
    """Greedy ``n`` tokens after ``tokens`` in ``slot``: (prompt tokens reused, tokens)."""
    seq = Sequence(Prompt(list(tokens)), n, Sampling(temperature=0), cancelled=lambda: False, slot=slot)
    runner.begin(seq)
    out: list[int] = []
    try:
        while len(out) < n:
            result = runner.step_many([seq])[0]
            if result is None:
                break
            if result is not PENDING:
                out.append(result)
    finally:
        runner.end(seq, True)
    return seq.reused, out


def same_as_fresh(runner: Any, prompt: list[int], got: list[int], what: str) -> None:
    runner.clear_slot(1)
    reused, fresh = run(runner, prompt, 1, n=len(got))
    assert reused == 0
    assert_same_greedy_tokens(runner.path, prompt, got, fresh, what)


def test_reuse_and_checkpoints(runner: Any) -> None:
    rng = random.Random(7)
    system = [rng.randrange(200, 40000) for _ in range(900)]
    first = [*system, 11, 12, 13, 14, 15]
    runner.clear_slot(0)
    reused, answer = run(runner, first, 0)
    assert reused == 0
    held = runner.context_tokens(0)
    assert held == first + answer[:-1]  # the last sampled token is not decoded yet
    if runner._cut != "any":
        end = len(first) - 4  # and n_ubatch (512) before it
        assert [c.n_tokens for c in runner._slots[0].checkpoints] == sorted({256, 512, 768, end, end - 512})

    # The next turn: what the slot holds is a prefix of the prompt, reused whole.
    second = [*held, 21, 22, 23]
    assert runner.reusable_in(Prompt(second), 0) == len(held)
    reused, answer = run(runner, second, 0)
    assert reused == len(held)
    same_as_fresh(runner, second, answer, "the next turn")

    # The last turn edited: the prompt parts at 890, after the checkpoint at 768.
    edited = [*system[:890], 31, 32, 33]
    expected = 890 if runner._cut == "window" else 768  # the window still holds 890 - 128 onwards
    assert runner.reusable_in(Prompt(edited), 0) == expected
    reused, answer = run(runner, edited, 0)
    assert reused == expected
    same_as_fresh(runner, edited, answer, "an edited last turn")

    # Parting far back: a checkpoint on both kinds of models.
    early = [*system[:600], 41, 42]
    assert runner.reusable_in(Prompt(early), 0) == 512
    saved = runner.save_context(0)
    assert saved is not None and saved.nbytes > 0
    assert runner.reusable_from(Prompt(early), saved) == 512
    runner.clear_slot(0)
    assert runner.reusable_in(Prompt(early), 0) == 0
    runner.restore_context(saved, 0)  # the checkpoints come back with the state
    reused, answer = run(runner, early, 0)
    assert reused == 512
    same_as_fresh(runner, early, answer, "a checkpoint restored from host memory")
