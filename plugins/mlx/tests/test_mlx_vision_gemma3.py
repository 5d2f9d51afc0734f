"""Gemma 3 images on MLX (:mod:`missive_mlx.vision_gemma3`), on a tiny
random-weight Gemma 3 (:mod:`tiny_vision`: 4 soft tokens an image, a
sliding-window layer and a global one) with SmolLM2's tokenizer.

* placement: the prompt's tokens are those of transformers'
  ``Gemma3Processor`` for the same text (``"\\n\\n"``, ``<start_of_image>``,
  ``mm_tokens_per_image`` soft tokens, ``<end_of_image>``, ``"\\n\\n"``),
  whatever the image's size;
* attention: an image's soft tokens read each other both ways, everything
  else causally (transformers' ``Gemma3Model``: the image blocks OR-ed into
  the causal and sliding-window masks). The reference is mlx-vlm's own
  language model and embeddings (``get_input_embeddings``: features scaled
  by ``1 / sqrt(hidden_size)``) given that mask, written here from the
  image spans, without a cache (mlx-vlm's ``generate_step`` gives none:
  causal, which the checks tell apart). The logits of the prompt's last
  token, read in one pass or from a cached prefix (ending inside an image
  too: the image is read whole), and the greedy tokens through the runner
  (``begin`` / ``step``, mlx-lm's ``generate_step``) equal it; so they do
  with a sliding window shorter than an image (a ``RotatingKVCache`` that
  wraps) and prefill chunks that cut images. A repeated prompt reads the
  image from the prompt cache, another image stops the prefix at it, a
  prefix ending inside an image is cut back to its start;
* served through the SDK: ``count_tokens`` equals the usage, an image
  takes the same tokens whatever its size, the cache reads as above.

The answers are random tokens: only the plumbing is checked.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator, Sequence
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
    ids_of,
    prompt_of,
    rgb_images,
    runner_tokens,
    stacked,
    user,
)

from missive.testing import live_server

pytest.importorskip("mlx_vlm", reason="mlx-vlm (missive-mlx[vision]) is not installed")

VISION = "tiny-gemma3-vl"
WINDOW = 3


@pytest.fixture(scope="module")
def runner(gemma3_vl_dir: Path) -> Iterator[Any]:
    r = _runner(gemma3_vl_dir)
    yield r
    r.close()


@pytest.fixture(scope="module")
def window_dir(gemma3_vl_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny Gemma 3 with a sliding window of 3 tokens (shorter than an image)."""
    out = tmp_path_factory.mktemp("gemma3vl-window")
    shutil.copytree(gemma3_vl_dir, out, dirs_exist_ok=True)
    config = json.loads((out / "config.json").read_text())
    config["text_config"]["sliding_window"] = WINDOW
    (out / "config.json").write_text(json.dumps(config))
    return out


def _runner(path: Path, **settings: Any) -> Any:
    from missive_mlx.runner import MlxRunner
    from missive_mlx.settings import parse_settings

    r = MlxRunner(VISION, parse_settings(VISION, {"model_path": str(path), **settings}), 2048)
    r.load()
    return r


def _reference_logits(
    runner: Any, prompt: Any, generated: Sequence[int] = (), *, both_ways: bool = True
) -> Any:
    """Logits of the last token of the prompt and ``generated`` from mlx-vlm's
    own embeddings and language model layers, without a cache, each layer
    given the whole mask of its kind: causal (within the sliding window in
    a sliding layer) or, when ``both_ways``, both tokens in one image."""
    import mlx.core as mx

    vlm = runner.vision.vlm
    ids = mx.concatenate([ids_of(runner, prompt), mx.array([list(generated)], dtype=mx.int32)], axis=1)
    embeds = vlm.get_input_embeddings(ids, stacked(prompt, "pixel_values"), mask=mx.ones(ids.shape))
    n = ids.shape[1]
    image = [-1] * n  # which image each position is in
    for i, span in enumerate(prompt.media.spans):
        image[span.start : span.end] = [i] * span.n_tokens
    block = mx.array(image)
    q, k = mx.arange(n)[:, None], mx.arange(n)[None]
    same = (
        (block[:, None] == block[None]) & (block[:, None] >= 0) if both_ways else mx.zeros((n, n), mx.bool_)
    )
    model = vlm.language_model.model
    full = (k <= q) | same
    sliding = ((k <= q) & (q - k < model.window_size)) | same
    pattern = model.sliding_window_pattern
    h = embeds.inputs_embeds
    h = h * mx.array(model.config.hidden_size**0.5, mx.bfloat16).astype(h.dtype)
    for i, layer in enumerate(model.layers):
        h = layer(h, full if i % pattern == pattern - 1 else sliding, None)
    return vlm.language_model.lm_head(model.norm(h))[0, -1].astype(mx.float32)


def _reference_tokens(runner: Any, prompt: Any, n: int) -> list[int]:
    """Greedy tokens of :func:`_reference_logits`, the whole sequence read anew for each."""
    import mlx.core as mx

    out: list[int] = []
    while len(out) < n and (not out or out[-1] not in runner.tokenizer.eos_token_ids):
        out.append(int(mx.argmax(_reference_logits(runner, prompt, out)).item()))
    return out


def test_image_tokens_are_the_processors(runner: Any, gemma3_vl_dir: Path) -> None:
    from mlx_vlm.utils import load_processor
    from tiny_vision import GEMMA_TOKENS_PER_IMAGE

    processor = load_processor(gemma3_vl_dir, add_detokenizer=False)
    vocab = runner.tokenizer.get_vocab()
    sizes = [(100, 60), (300, 200), (31, 500), (2, 500)]
    images = [png(w, h, (9, 99, 199 - i)) for i, (w, h) in enumerate(sizes)]
    # the "\n\n" after an image joins text starting with a word or with newlines
    for text in (" What is it?", "\n\nWhat?", "\nWhat"):
        prompt = prompt_of(runner, images, text)
        expected = processor(
            text=[BEFORE + " <start_of_image>" * len(images) + text + AFTER],
            images=rgb_images(images),
        )["input_ids"]
        assert ids_of(runner, prompt)[0].tolist() == [int(t) for t in list(expected[0])], text
        for span in prompt.media.spans:
            assert span.n_tokens == GEMMA_TOKENS_PER_IMAGE
            assert prompt.tokens[span.start - 1] == vocab["<start_of_image>"]
            assert prompt.tokens[span.end] == vocab["<end_of_image>"]
            assert len(set(prompt.tokens[span.start : span.end])) == 1 and prompt.tokens[span.start] < 0


def _splits(prompt: Any) -> tuple[int, ...]:
    """One pass; past both images; inside an image; between them; at an image's start."""
    first, second = prompt.media.spans
    return (1, second.end + 2, first.start + 2, first.end - 1, first.end + 1, second.start)


def test_logits_equal_mlx_vlm_with_images_read_both_ways(runner: Any) -> None:
    import mlx.core as mx

    prompt = prompt_of(runner, [png(100, 60, (200, 10, 10)), png(60, 90, (10, 200, 10))])
    reference = _reference_logits(runner, prompt)
    # the prompt is shorter than the sliding window: mlx-vlm's language model takes the one mask
    vlm, ids = runner.vision.vlm, ids_of(runner, prompt)
    full = vlm.get_input_embeddings(ids, stacked(prompt, "pixel_values"), mask=mx.ones(ids.shape))
    n = ids.shape[1]
    assert n < vlm.language_model.model.window_size
    image = mx.zeros((n,), mx.bool_)
    for span in prompt.media.spans:
        image = image | ((mx.arange(n) >= span.start) & (mx.arange(n) < span.end))
    q, k = mx.arange(n)[:, None], mx.arange(n)[None]
    # consecutive image positions are one image here (text separates the two)
    runs = mx.cumsum((image & ~mx.concatenate([mx.array([False]), image[:-1]])).astype(mx.int32))
    mask = (k <= q) | (image[:, None] & image[None] & (runs[:, None] == runs[None]))
    direct = vlm.language_model(ids, inputs_embeds=full.inputs_embeds, mask=mask).logits[0, -1]
    assert mx.allclose(direct.astype(mx.float32), reference, atol=1e-4).item()
    # read causally (mlx-vlm's generate_step), the logits differ
    causal = _reference_logits(runner, prompt, both_ways=False)
    assert not mx.allclose(causal, reference, atol=1e-3).item()
    for split in _splits(prompt):
        got = _last_logits(runner, prompt, split)
        assert mx.allclose(got, reference, atol=1e-4).item(), split
    # the check tells a wrong feature scale apart (the features as the projector gives them)
    family = runner.vision.family
    scale = family.scale
    try:
        family.scale = 1.0
        wrong = _last_logits(runner, prompt, 1)
    finally:
        family.scale = scale
    assert not mx.allclose(wrong, reference, atol=1e-4).item()


def test_greedy_tokens_equal_the_reference_and_the_cache_reads_the_image(runner: Any) -> None:
    n = 8
    prompt = prompt_of(runner, [png(90, 70, (40, 80, 120), noise=3)])
    (span,) = prompt.media.spans
    reference = _reference_tokens(runner, prompt, n)
    got, reused = runner_tokens(runner, prompt, n)
    assert got == reference, (got, reference)
    # the same prompt again: read from the prompt cache, image included, same tokens
    again, reused = runner_tokens(runner, prompt, n)
    assert reused > span.end and again == got
    # another image: the cached prefix stops at its first token
    other = prompt_of(runner, [png(90, 70, (40, 80, 121), noise=3)])
    assert other.tokens[: span.start] == prompt.tokens[: span.start]
    _, reused = runner_tokens(runner, other, n)
    assert reused <= span.start


def test_sliding_window_shorter_than_an_image_and_chunks_that_cut_images(window_dir: Path) -> None:
    """A ``RotatingKVCache`` of 3 tokens (it wraps) and prefill chunks of 2 and
    5 tokens: a chunk that ends inside an image runs on to its end, the next
    one skips what was read (whole chunks inside the image too)."""
    import mlx.core as mx

    for step in (2, 5, 2048):
        r = _runner(window_dir, prefill_step_size=step)
        try:
            prompt = prompt_of(r, [png(100, 60, (200, 10, 10)), png(60, 90, (10, 200, 10))])
            assert len(prompt.tokens) > 4 * WINDOW
            reference = _reference_logits(r, prompt)
            assert not mx.allclose(_reference_logits(r, prompt, both_ways=False), reference, atol=1e-3).item()
            for split in _splits(prompt):
                assert mx.allclose(_last_logits(r, prompt, split), reference, atol=1e-4).item(), (step, split)
            expected = _reference_tokens(r, prompt, 6)
            got, reused = runner_tokens(r, prompt, 6)
            assert reused == 0 and got == expected, (step, got, expected)
            # the prompt's checkpoint (the window wrapped: the cache cannot be cut back)
            again, reused = runner_tokens(r, prompt, 6)
            assert reused == len(prompt.tokens) - 1 and again == got, step
        finally:
            r.close()


def test_a_cached_prefix_ending_inside_an_image_is_cut_back_to_its_start(runner: Any) -> None:
    from missive_mlx.prompt_cache import PromptCacheStore

    prompt = prompt_of(runner, [png(90, 70, (1, 80, 120), noise=5)])
    (span,) = prompt.media.spans
    tokens = prompt.tokens
    longer = tokens[: span.end] + [tokens[span.start]] * 2 + tokens[span.end :]  # the same id, 2 more
    store = runner.store
    store.clear()
    try:
        # entries ending inside the image, or going on with it where the prompt's ends
        for entry in (tokens[: span.start + 2], longer):
            store.put(entry, runner.model.make_cache())
            assert store.reusable(tokens) == span.start
            store.clear()
        # a real cache of the first tokens, the last two inside the image: cut back to its start
        cache = runner.model.make_cache()
        runner.vision.inputs(prompt, 0, tokens[: span.start + 2])
        runner.vision.lm.plan = None  # read as text: only the cache's length matters here
        runner.model(ids_of(runner, prompt)[:, : span.start + 2], cache=cache)
        store.put(tokens[: span.start + 2], cache)
        cache, reused = store.take(tokens, runner.model.make_cache)
        assert reused == span.start and cache[0].offset == span.start
    finally:
        store.clear()
    # a model whose images read causally keeps a prefix ending inside one
    causal = PromptCacheStore(2, can_trim=lambda c: True, trim=lambda c, n: n)
    causal.put(tokens[: span.start + 2], [])
    assert causal.reusable(tokens) == span.start + 2


# -- served ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(gemma3_vl_dir: Path) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            VISION: {"driver": "mlx", "context_window": 2048, "settings": {"model_path": str(gemma3_vl_dir)}},
        }
    }
    with live_server(config, timeout=300) as base:
        yield anthropic.Anthropic(base_url=base, api_key="unused", max_retries=0, timeout=300)


def test_served_image_counts_and_cache(client: anthropic.Anthropic) -> None:
    from tiny_vision import GEMMA_TOKENS_PER_IMAGE

    x, y = png(200, 140, (10, 20, 30), noise=7), png(200, 140, (10, 20, 31), noise=7)
    first, total = ask(client, VISION, [user(x, "Which image is this?")])
    assert first.usage.output_tokens >= 1
    _, small = ask(client, VISION, [user(png(20, 300, (1, 2, 3)), "Which image is this?")])
    assert small == total  # every image takes mm_tokens_per_image soft tokens
    text_only = client.messages.count_tokens(
        model=VISION, system=SYSTEM, messages=[{"role": "user", "content": "Which image is this?"}]
    ).input_tokens
    # the soft tokens, <start_of_image>, <end_of_image>, and the "\n\n" around them
    assert total - text_only >= GEMMA_TOKENS_PER_IMAGE + 2 + 2
    again, _ = ask(client, VISION, [user(x, "Which image is this?")])
    assert again.usage.cache_read_input_tokens == total - 1  # all but the last token
    other, other_total = ask(client, VISION, [user(y, "Which image is this?")])
    assert other_total == total
    # the prefix stops at the image: its tokens, <end_of_image> and the text after are read anew
    assert other.usage.input_tokens > GEMMA_TOKENS_PER_IMAGE + 1
    assert (other.usage.cache_read_input_tokens or 0) < total - GEMMA_TOKENS_PER_IMAGE - 1
