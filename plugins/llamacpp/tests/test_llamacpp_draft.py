"""Speculative decoding with a draft model (issue 43): ``settings.draft_model``.

Tiny random-weight Llama models written by the test kit, all of one
vocabulary (the kit's byte-level one). One live ``missive serve`` serves the
target three times: without drafting, drafting with itself (every greedy
draft token is the target's own choice, so nearly all are accepted), and
drafting with another random model (most are rejected). ``draft_p_min = 0``
makes the flat distributions of random models draft at all. Through the
SDK, greedy answers are the same in all three (the verification rule of
:mod:`missive_llamacpp.speculative`), and ``/metrics`` counts the drafted
and accepted tokens. A draft model of another vocabulary, or one whose
cache cannot drop a rejected draft (a hybrid model), stops start-up with
an error naming ``settings.draft_model``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tiny_served import TEMPLATE, entry, greedy

from missive.config import ConfigError
from missive.testing import ServerProcess, in_process_app, serve_process

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")

PROMPT = "Weather in Lyon? Weather in Lyon? Weather in"


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from missive_llamacpp.testing_archs import TinyModel
    from missive_llamacpp.testing_gguf import write_tiny_gguf
    from missive_llamacpp.testing_hybrid import write_tiny

    folder = tmp_path_factory.mktemp("draft")

    def tiny(name: str, seed: int, special: str = "<|end|>") -> Path:
        return write_tiny_gguf(
            folder / name,
            arch="llama",
            chat_template=TEMPLATE,
            special_tokens=[special],
            model=TinyModel(seed=seed),
        )

    return {
        "target": tiny("target.gguf", 1),
        "other": tiny("other.gguf", 2),
        "foreign": tiny("foreign.gguf", 3, special="<|eot|>"),
        "hybrid": write_tiny(folder / "lfm2.gguf", "lfm2"),
    }


def drafting(path: Path, **settings: Any) -> dict[str, Any]:
    """Two slots; ``draft_p_min`` 0: random models' flat distributions draft at all."""
    return entry(path, parallel=2, draft_p_min=0.0, **settings)


@pytest.fixture(scope="module")
def server(files: dict[str, Path]) -> Iterator[ServerProcess]:
    target = files["target"]
    config = {
        "models": {
            "plain": drafting(target, speculative="off"),
            "self": drafting(target, speculative="draft", draft_model=str(target)),
            "other": drafting(target, speculative="draft", draft_model=str(files["other"])),
            "auto": drafting(target, speculative="auto", draft_model=str(files["other"])),
        }
    }
    with serve_process(config, timeout=300) as server:
        yield server


def counts(server: ServerProcess, model: str) -> tuple[float, float]:
    body = httpx.get(f"{server.url}/metrics", timeout=30).text

    def counter(name: str) -> float:
        found = re.search(
            rf'^missive:spec_decode_num_{name}_tokens_total\{{model_name="{model}"\}} (\S+)$', body, re.M
        )
        assert found, f"no {name} counter for {model}"
        return float(found.group(1))

    return counter("draft"), counter("accepted")


def test_greedy_output_is_the_same_with_a_draft_model(server: ServerProcess) -> None:
    plain, itself, other = (greedy(server, model, PROMPT, 24) for model in ("plain", "self", "other"))
    assert plain and itself == plain and other == plain
    drafted, accepted = counts(server, "self")
    assert drafted > 0 and accepted >= 0.9 * drafted, (drafted, accepted)  # its own choices
    drafted, accepted = counts(server, "other")
    assert drafted > 0 and accepted < drafted, (drafted, accepted)  # another model's guesses
    assert counts(server, "plain") == (0.0, 0.0)
    line = next(x for x in server.log().splitlines() if "model other loaded from" in x)
    assert "speculative=draft (draft model other.gguf, p_min 0.0" in line, line
    # "auto" times a draft token against the model's (the same size here: it cannot pay).
    line = next(x for x in server.log().splitlines() if "model auto loaded from" in x)
    assert re.search(
        r"speculative=auto: (draft|off) \(a 9-token step costs .*, a draft token \d+\.\d+x", line
    ), line
    assert greedy(server, "auto", PROMPT, 24) == plain


@pytest.mark.parametrize(
    ("draft", "message"),
    [
        (
            "foreign",
            r"settings.draft_model .*foreign.gguf cannot draft for this model: its vocabulary differs "
            r"\(token 257 is '<\|eot\|>' where the model's is '<\|end\|>'\)",
        ),
        (
            "hybrid",
            r"settings.draft_model .*lfm2.gguf: a recurrent, hybrid or sliding-window model cannot drop",
        ),
    ],
)
def test_a_draft_model_that_cannot_draft_stops_start_up(
    files: dict[str, Path], draft: str, message: str
) -> None:
    config = {"models": {"m": drafting(files["target"], speculative="draft", draft_model=str(files[draft]))}}
    with pytest.raises(ConfigError, match=message):
        with in_process_app(config):
            pass


def test_draft_needs_a_draft_model() -> None:
    from missive_llamacpp.settings import parse_settings

    with pytest.raises(ConfigError, match='speculative = "draft" needs a draft_model'):
        parse_settings("m", {"model_path": "x", "speculative": "draft"})


def test_the_draft_cache_of_another_cache_scope_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draft model's cache of a slot keeps the previous sequence's tokens;
    a sequence of another cache scope (another API key's, ``Prompt.cache_scope``)
    reads its whole prefix again (the drafting speed would tell what the
    other key sent), one of the same scope only what differs."""
    import llama_cpp

    from missive_llamacpp.draft import DraftModel

    removed: list[tuple[int, int, int]] = []
    monkeypatch.setattr(
        llama_cpp, "llama_memory_seq_rm", lambda _m, slot, p0, p1: removed.append((slot, p0, p1))
    )
    model = DraftModel.__new__(DraftModel)
    model._memory = None
    model.tokens, model.scopes = [[1, 2, 3, 4]], ["key:alice"]
    read: list[list[int]] = []

    def _read(slot: int, tokens: list[int]) -> bool:
        read.append(list(tokens))
        model.tokens[slot].extend(tokens)
        return False  # nothing drafted: only what was read matters here

    model._read = _read  # type: ignore[method-assign]
    assert model.propose(0, [1, 2, 3, 4, 5], 2, "key:bob") == []
    assert read == [[1, 2, 3, 4, 5]] and removed == [(0, -1, -1)]
    assert model.propose(0, [1, 2, 3, 4, 5, 6], 2, "key:bob") == []
    assert read[-1] == [6]  # the same scope: the cached prefix is kept
