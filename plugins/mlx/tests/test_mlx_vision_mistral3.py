"""Mistral 3 and Pixtral images on MLX (:mod:`missive_mlx.vision_mistral3`),
on tiny random-weight models (:mod:`tiny_vision`: a Pixtral tower of 8-pixel
patches; Mistral 3 merges them 2 x 2 into a token, up to 128 pixels a side;
Pixtral takes a token a patch, up to 64) with SmolLM2's tokenizer.

* placement: the prompt's tokens are those of mlx-vlm's
  ``Mistral3Processor`` / ``PixtralProcessor`` for the same text (rows of ``[IMG]``, each closed
  by ``[IMG_BREAK]``, the last by ``[IMG_END]``), for several sizes;
* the model: the logits of the prompt's last token, read in one pass or
  from a cached prefix (ending inside an image too), equal mlx-vlm's own
  forward pass; with the break tokens given features they do not; greedy
  tokens through the runner equal mlx-vlm's ``generate_step``; a repeated
  prompt reads the image from the prompt cache, another image stops the
  prefix at it;
* served through the SDK: ``count_tokens`` equals the usage, an image
  takes its rows and breaks, the cache reads as above.

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

VISION = "tiny-mistral3"


def mistral_tokens(folder: Path, width: int, height: int) -> int:
    """Tokens of a ``width x height`` image for the tiny model's processor
    (:data:`tiny_vision.MISTRAL_GEOMETRY`): scaled down to fit the longest
    side (never up), each side rounded up to a multiple of the pixels a
    token (Mistral 3: 16, patch 8 x merge 2; Pixtral: 8); a row of tokens,
    plus its break (the last row's end) token."""
    import json
    import math

    from tiny_vision import MISTRAL_GEOMETRY

    longest, side = MISTRAL_GEOMETRY[json.loads((folder / "config.json").read_text())["model_type"]]
    scale = min(1.0, longest / max(width, height))
    w, h = int(width * scale), int(height * scale)
    cols, rows = math.ceil(w / side), math.ceil(h / side)
    return rows * (cols + 1)


@pytest.fixture(scope="module")
def runner(mistral3_vl_dir: Path) -> Iterator[Any]:
    from missive_mlx.runner import MlxRunner
    from missive_mlx.settings import parse_settings

    r = MlxRunner(VISION, parse_settings(VISION, {"model_path": str(mistral3_vl_dir)}), 2048)
    r.load()
    yield r
    r.close()


def _reference_logits(runner: Any, prompt: Any) -> Any:
    """mlx-vlm's own forward pass of the whole prompt (its embeddings)."""
    import mlx.core as mx

    vlm = runner.vision.vlm
    ids = ids_of(runner, prompt)
    sizes = stacked(prompt, "image_sizes")
    features = vlm.get_input_embeddings(ids, stacked(prompt, "pixel_values"), image_sizes=sizes)
    out = vlm.language_model(ids, inputs_embeds=features.inputs_embeds, cache=runner.model.make_cache())
    return out.logits[0, -1].astype(mx.float32)


def test_image_tokens_are_the_processors(runner: Any, mistral3_vl_dir: Path) -> None:
    from mlx_vlm.utils import load_processor

    processor = load_processor(mistral3_vl_dir, add_detokenizer=False)
    vocab = runner.tokenizer.get_vocab()
    for width, height in ((100, 60), (300, 200), (31, 500), (16, 16)):
        image = png(width, height, (9, 99, 199))
        prompt = prompt_of(runner, [image])
        expected = processor(text=[BEFORE + " [IMG] What is it?" + AFTER], images=rgb_images([image]))
        ids = ids_of(runner, prompt)[0].tolist()
        assert ids == [int(t) for t in list(expected["input_ids"][0])], (width, height)
        (span,) = prompt.media.spans
        assert span.n_tokens == mistral_tokens(mistral3_vl_dir, width, height), (width, height)
        assert ids[span.end - 1] == vocab["[IMG_END]"]
        assert (
            set(prompt.tokens[span.start : span.end]) == {prompt.tokens[span.start]}
            and prompt.tokens[span.start] < 0
        )


def test_logits_equal_mlx_vlm_in_one_pass_and_from_a_cached_prefix(runner: Any) -> None:
    import mlx.core as mx

    prompt = prompt_of(runner, [png(100, 60, (200, 10, 10)), png(100, 60, (10, 200, 10))])
    first, second = prompt.media.spans
    reference = _reference_logits(runner, prompt)
    # one pass; past both images; inside an image (after its first break); between them
    for split in (1, second.end + 2, first.start + 10, first.end + 1):
        got = _last_logits(runner, prompt, split)
        assert mx.allclose(got, reference, atol=1e-4).item(), split
    # the check tells features on the break tokens apart (every position an [IMG])
    saved = runner.vision._rows
    try:
        runner.vision._rows = lambda span, features: mx.concatenate(
            [features, features[: span.n_tokens - features.shape[0]]]
        )
        wrong = _last_logits(runner, prompt, 1)
    finally:
        runner.vision._rows = saved
    assert not mx.allclose(wrong, reference, atol=1e-4).item()


def test_greedy_tokens_equal_mlx_vlm_generate_and_the_cache_reads_the_image(runner: Any) -> None:
    import mlx.core as mx
    from mlx_vlm.generate.ar import generate_step

    n = 8
    prompt = prompt_of(runner, [png(90, 70, (40, 80, 120), noise=3)])
    (span,) = prompt.media.spans
    ids, pixels, sizes = (
        ids_of(runner, prompt),
        stacked(prompt, "pixel_values"),
        stacked(prompt, "image_sizes"),
    )
    steps = generate_step(
        ids, runner.vision.vlm, pixels, mx.ones(ids.shape), max_tokens=n, temperature=0.0, image_sizes=sizes
    )
    reference = [int(token) for token, _ in steps]
    other = prompt_of(runner, [png(90, 70, (40, 80, 121), noise=3)])
    greedy_and_cache(runner, prompt, other, reference, n)


# -- served ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(mistral3_vl_dir: Path) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            VISION: {
                "driver": "mlx",
                "context_window": 2048,
                "settings": {"model_path": str(mistral3_vl_dir)},
            },
        }
    }
    with live_server(config, timeout=300) as base:
        yield anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)


def test_served_image_counts_and_cache(client: anthropic.Anthropic, mistral3_vl_dir: Path) -> None:
    x, y = png(200, 140, (10, 20, 30), noise=7), png(200, 140, (10, 20, 31), noise=7)
    n = mistral_tokens(mistral3_vl_dir, 200, 140)
    first, total = ask(client, VISION, [user(x, "Which image is this?")])
    assert first.usage.output_tokens >= 1
    text_only = client.messages.count_tokens(
        model=VISION, system=SYSTEM, messages=[{"role": "user", "content": "Which image is this?"}]
    ).input_tokens
    assert total - text_only == n + 1  # and the newline joining the image's part to the text
    again, _ = ask(client, VISION, [user(x, "Which image is this?")])
    assert again.usage.cache_read_input_tokens == total - 1  # all but the last token
    other, other_total = ask(client, VISION, [user(y, "Which image is this?")])
    assert other_total == total
    assert other.usage.input_tokens > n
    assert (other.usage.cache_read_input_tokens or 0) < total - n
