"""The rules of speculative decoding without a model (:mod:`missive_llamacpp.speculative`):
prompt-lookup drafting, the adaptive draft length, the acceptance rule with
a stub sampler (greedy equality, end of generation inside a run, and that a
sampled run keeps the target distribution)."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from missive_llamacpp.speculative import AUTO_MIN_SPEEDUP, DraftLength, NgramDrafter, auto_decision, verify

pytestmark = pytest.mark.unit

EOG = -1


def drafter(tokens: list[int], low: int = 2, high: int = 4) -> NgramDrafter:
    d = NgramDrafter(low, high)
    d.extend(tokens)
    return d


def test_the_tokens_after_the_longest_suffix_ngram_are_proposed() -> None:
    # The suffix [7, 8, 9] occurred earlier, followed by 1 2 3; [8, 9] alone
    # also occurred later, followed by 5: the longest n-gram wins.
    d = drafter([7, 8, 9, 1, 2, 3, 0, 8, 9, 5, 6, 7, 8, 9])
    assert d.propose(3) == [1, 2, 3]
    assert d.propose(1) == [1]


def test_the_most_recent_occurrence_is_used_and_the_suffix_never_matches_itself() -> None:
    d = drafter([1, 2, 10, 1, 2, 20, 1, 2])
    assert d.propose(2) == [20, 1]
    assert drafter([1, 2]).propose(4) == []  # only the suffix itself


def test_no_match_below_the_shortest_ngram_and_k_bounds_the_draft() -> None:
    d = drafter([5, 1, 9, 1], low=2, high=3)  # [1] recurs, but no 2-gram does
    assert d.propose(4) == []
    assert drafter([5, 1, 9, 1], low=1, high=3).propose(4) == [9, 1]
    assert drafter([1, 2, 3, 1, 2], low=2, high=2).propose(0) == []


def test_a_draft_stops_before_an_image_position() -> None:
    # Image positions hold a negative synthetic id (missive_llamacpp.vision):
    # decoding one as a token failed the whole step (llama_decode -1, a 500
    # on Claude Code's screenshot in a tool result).
    image = -977
    d = drafter([7, 8, 4, image, image, 5, 7, 8])
    assert d.propose(4) == [4]
    assert drafter([7, 8, image, image, 7, 8]).propose(3) == []


def test_the_index_grows_with_the_output() -> None:
    d = drafter([3, 4, 5, 6])
    assert d.propose(2) == []
    d.extend([3, 4])
    assert d.propose(3) == [5, 6, 3]  # the continuation runs into the copy itself
    d.extend([5, 6, 3, 4])
    assert d.propose(2) == [5, 6]


def test_the_draft_length_grows_on_full_acceptance_and_shrinks_on_rejection() -> None:
    length = DraftLength(1, 8)
    assert length.n == 4
    length.update(4, 4)
    assert length.n == 6
    length.update(6, 6)
    length.update(8, 8)
    assert length.n == 8  # capped at draft_max
    for _ in range(20):
        length.update(3, 0)
    assert length.n == 1  # never below draft_min
    length.update(0, 0)  # no draft: unchanged
    assert length.n == 1


def stub_sampler(answer: list[int]) -> tuple[list[int], object]:
    calls: list[int] = []

    def sample(i: int) -> int:
        calls.append(i)
        return answer[i]

    return calls, sample


def test_a_matching_draft_is_kept_and_the_next_token_comes_with_it() -> None:
    calls, sample = stub_sampler([11, 12, 13, 14])
    emitted, accepted = verify(sample, [11, 12, 13], lambda t: t == EOG)  # type: ignore[arg-type]
    assert (emitted, accepted) == ([11, 12, 13, 14], 3)
    assert calls == [0, 1, 2, 3]


def test_the_first_mismatch_is_emitted_and_nothing_after_it_is_sampled() -> None:
    calls, sample = stub_sampler([11, 99, 13, 14])
    emitted, accepted = verify(sample, [11, 12, 13], lambda t: t == EOG)  # type: ignore[arg-type]
    assert (emitted, accepted) == ([11, 99], 1)
    assert calls == [0, 1]  # the grammar in the chain never saw a rejected position


def test_end_of_generation_inside_a_run_ends_it() -> None:
    _, sample = stub_sampler([11, EOG, 13])
    assert verify(sample, [11, 12], lambda t: t == EOG) == ([11, None], 1)  # type: ignore[arg-type]
    _, sample = stub_sampler([EOG])
    assert verify(sample, [5], lambda t: t == EOG) == ([None], 0)  # type: ignore[arg-type]


def test_greedy_output_is_the_same_with_any_draft() -> None:
    """Whatever is drafted, the emitted tokens are the greedy answer's next ones."""
    rng = random.Random(7)
    answer = [rng.randrange(5) for _ in range(200)]
    out: list[int] = []
    while len(out) < 150:
        k = rng.randrange(0, 6)
        draft = [answer[len(out) + i] if rng.random() < 0.7 else rng.randrange(5) for i in range(k)]
        base = len(out)
        emitted, _ = verify(lambda i, base=base: answer[base + i], draft, lambda t: False)
        out += [t for t in emitted if t is not None]
    assert out == answer[: len(out)]


def test_sampled_runs_keep_the_target_distribution() -> None:
    """Two tokens drawn from a fixed two-step distribution, with and without
    a draft that is often wrong: the joint frequencies agree (a chi-square
    over the four outcomes, fixed seeds, so it cannot flake)."""
    p_first = {0: 0.7, 1: 0.3}
    p_second = {0: {0: 0.2, 1: 0.8}, 1: {0: 0.6, 1: 0.4}}

    def draw(rng: random.Random, dist: dict[int, float]) -> int:
        return 0 if rng.random() < dist[0] else 1

    def run(rng: random.Random, draft: list[int]) -> tuple[int, int]:
        emitted: list[int] = []
        while len(emitted) < 2:
            got, _ = verify(
                lambda i: draw(rng, p_first if len(emitted) + i == 0 else p_second[(emitted + draft)[0]]),
                draft[len(emitted) :][: 2 - len(emitted) - 1],
                lambda t: False,
            )
            emitted.extend(t for t in got if t is not None)
        return emitted[0], emitted[1]

    n = 20_000
    plain = Counter(run(random.Random(i), []) for i in range(n))
    drafted = Counter(run(random.Random(n + i), [1]) for i in range(n))
    expected = {(a, b): n * p_first[a] * p_second[a][b] for a in (0, 1) for b in (0, 1)}
    for counts in (plain, drafted):
        chi2 = sum((counts[key] - e) ** 2 / e for key, e in expected.items())
        assert chi2 < 16.3, (counts, expected)  # p = 0.001 with 3 degrees of freedom


def test_auto_drafts_where_a_verifying_step_costs_little_more_than_one_token() -> None:
    """Leviathan et al.'s expected tokens a step, (1 - a^9) / (1 - a) = 3.20
    at a = 0.7, over the measured cost ratio: a GPU-like 1.05x drafts, the
    2-core CPU's ~7x does not, and the line falls between 2.5x and 2.6x."""
    on, expected = auto_decision(0.010, 0.0105)
    assert on and expected == pytest.approx(3.20 / 1.05, rel=0.01)
    on, expected = auto_decision(0.023, 0.161)
    assert not on and expected == pytest.approx(3.20 / 7, rel=0.01)
    assert auto_decision(1.0, 2.5)[0] and not auto_decision(1.0, 2.6)[0]
    assert auto_decision(1.0, 2.5)[1] >= AUTO_MIN_SPEEDUP > auto_decision(1.0, 2.6)[1]
    assert auto_decision(0.0, 1.0) == (False, 0.0)  # a clock that read nothing decides nothing
