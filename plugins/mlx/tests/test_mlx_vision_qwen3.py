"""Qwen3-VL images on MLX (:mod:`missive_mlx.vision_qwen3`), on a tiny
random-weight Qwen3-VL (:mod:`tiny_vision`: patches of 16 pixels, deepstack
features of two vision blocks added to the two text layers) with SmolLM2's
tokenizer.

* placement: the prompt's tokens are those of mlx-vlm's
  ``Qwen3VLProcessor`` for the same text (``<|vision_start|>``, one
  ``<|image_pad|>`` per merged patch, ``<|vision_end|>``);
* the model: the logits of the prompt's last token, read in one pass or
  from a cached prefix (ending inside an image too: the deepstack rows and
  the M-RoPE positions of the part read), equal mlx-vlm's own forward pass;
  without the deepstack features they do not; greedy tokens through the
  runner equal mlx-vlm's ``generate_step``; a repeated prompt reads the
  image from the prompt cache, another image stops the prefix at it;
* served through the SDK: ``count_tokens`` equals the usage and the cache
  reads as above.

The answers are random tokens: only the plumbing is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_mlx_vision import _last_logits, png
from vision_checks import (
    AFTER,
    BEFORE,
    SYSTEM,
    ask,
    greedy_and_cache,
    ids_of,
    prompt_of,
    rgb_images,
    stacked,
    user,
)

from missive.testing import live_server

pytest.importorskip("mlx_vlm", reason="mlx-vlm (missive-mlx[vision]) is not installed")

VISION = "tiny-qwen3-vl"
IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module")
def runner(qwen3_vl_dir: Path) -> Iterator[Any]:
    from missive_mlx.runner import MlxRunner
    from missive_mlx.settings import parse_settings

    r = MlxRunner(VISION, parse_settings(VISION, {"model_path": str(qwen3_vl_dir)}), 2048)
    r.load()
    yield r
    r.close()


def _reference_logits(runner: Any, prompt: Any) -> Any:
    """mlx-vlm's own forward pass of the whole prompt (its embeddings,
    deepstack features and M-RoPE positions)."""
    import mlx.core as mx

    vlm = runner.vision.vlm
    ids = ids_of(runner, prompt)
    grids = stacked(prompt, "image_grid_thw")
    features = vlm.get_input_embeddings(ids, stacked(prompt, "pixel_values"), image_grid_thw=grids)
    out = vlm.language_model(
        ids,
        inputs_embeds=features.inputs_embeds,
        cache=runner.model.make_cache(),
        position_ids=features.position_ids,
        visual_pos_masks=features.visual_pos_masks,
        deepstack_visual_embeds=features.deepstack_visual_embeds,
    )
    return out.logits[0, -1].astype(mx.float32)


def test_image_tokens_are_the_processors(runner: Any, qwen3_vl_dir: Path) -> None:
    from mlx_vlm.utils import load_processor

    processor = load_processor(qwen3_vl_dir, add_detokenizer=False)
    vocab = runner.tokenizer.get_vocab()
    sizes = [(100, 60), (300, 200), (31, 500)]
    images = [png(w, h, (9, 99, 199 - i)) for i, (w, h) in enumerate(sizes)]
    prompt = prompt_of(runner, images)
    expected = processor(
        text=[BEFORE + f" {IMAGE}" * len(images) + " What is it?" + AFTER], images=rgb_images(images)
    )
    assert ids_of(runner, prompt)[0].tolist() == [int(t) for t in list(expected["input_ids"][0])]
    for span in prompt.media.spans:
        assert prompt.tokens[span.start - 1] == vocab["<|vision_start|>"]
        assert prompt.tokens[span.end] == vocab["<|vision_end|>"]
        assert len(set(prompt.tokens[span.start : span.end])) == 1 and prompt.tokens[span.start] < 0


def test_logits_equal_mlx_vlm_in_one_pass_and_from_a_cached_prefix(runner: Any) -> None:
    import mlx.core as mx

    prompt = prompt_of(runner, [png(100, 60, (200, 10, 10)), png(60, 90, (10, 200, 10))])
    first, second = prompt.media.spans
    reference = _reference_logits(runner, prompt)
    # one pass; past both images (M-RoPE delta); inside an image; between them
    for split in (1, second.end + 2, first.start + 3, first.end + 1):
        got = _last_logits(runner, prompt, split)
        assert mx.allclose(got, reference, atol=1e-4).item(), split
    # the check tells missing deepstack features apart
    family = runner.vision.family
    try:
        family.deepstack = False
        runner.model.prompt = None
        wrong = _last_logits(runner, prompt, 1)
    finally:
        family.deepstack = True
    assert not mx.allclose(wrong, reference, atol=1e-4).item()


def test_greedy_tokens_equal_mlx_vlm_generate_and_the_cache_reads_the_image(runner: Any) -> None:
    import mlx.core as mx
    from mlx_vlm.generate.ar import generate_step

    n = 8
    prompt = prompt_of(runner, [png(90, 70, (40, 80, 120), noise=3)])
    (span,) = prompt.media.spans
    ids, pixels, grids = (
        ids_of(runner, prompt),
        stacked(prompt, "pixel_values"),
        stacked(prompt, "image_grid_thw"),
    )
    steps = generate_step(
        ids,
        runner.vision.vlm,
        pixels,
        mx.ones(ids.shape),
        max_tokens=n,
        temperature=0.0,
        image_grid_thw=grids,
    )
    reference = [int(token) for token, _ in steps]
    other = prompt_of(runner, [png(90, 70, (40, 80, 121), noise=3)])
    greedy_and_cache(runner, prompt, other, reference, n)


# -- served ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(qwen3_vl_dir: Path) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            VISION: {"driver": "mlx", "context_window": 2048, "settings": {"model_path": str(qwen3_vl_dir)}},
        }
    }
    with live_server(config, timeout=300) as base:
        yield anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)


def test_served_image_counts_and_cache(client: anthropic.Anthropic) -> None:
    x, y = png(200, 140, (10, 20, 30), noise=7), png(200, 140, (10, 20, 31), noise=7)
    first, total = ask(client, VISION, [user(x, "Which image is this?")])
    assert first.usage.output_tokens >= 1
    text_only = client.messages.count_tokens(
        model=VISION, system=SYSTEM, messages=[{"role": "user", "content": "Which image is this?"}]
    ).input_tokens
    # 200 x 140 resized to 192 x 128 (multiples of 32): 6 x 4 tokens, the start
    # and end tokens, and the newline joining the image's part to the text
    assert total - text_only == 24 + 3
    again, _ = ask(client, VISION, [user(x, "Which image is this?")])
    assert again.usage.cache_read_input_tokens == total - 1  # all but the last token
    other, other_total = ask(client, VISION, [user(y, "Which image is this?")])
    assert other_total == total
    assert other.usage.input_tokens > 24 + 1
    assert (other.usage.cache_read_input_tokens or 0) < total - 24 - 1
