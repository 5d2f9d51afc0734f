"""Gemma 3 images on MLX (:mod:`missive_mlx.vision_gemma3`), on a tiny
random-weight Gemma 3 (:mod:`tiny_vision`: 4 soft tokens an image, a
sliding-window layer and a global one) with SmolLM2's tokenizer.

* placement: the prompt's tokens are those of transformers'
  ``Gemma3Processor`` for the same text (``"\\n\\n"``, ``<start_of_image>``,
  ``mm_tokens_per_image`` soft tokens, ``<end_of_image>``, ``"\\n\\n"``),
  whatever the image's size;
* the model: the logits of the prompt's last token, read in one pass or
  from a cached prefix (ending inside an image too), equal mlx-vlm's own
  forward pass (its ``get_input_embeddings``: features scaled by
  ``1 / sqrt(hidden_size)``, causal attention); greedy tokens through the
  runner (``begin`` / ``step``, mlx-lm's ``generate_step``) equal mlx-vlm's
  ``generate_step`` for the same prompt and image; a repeated prompt reads
  the image from the prompt cache, another image stops the prefix at it;
* served through the SDK: ``count_tokens`` equals the usage, an image
  takes the same tokens whatever its size, the cache reads as above.

The answers are random tokens: only the plumbing is checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_mlx_vision import _last_logits, image_block, png
from vision_checks import AFTER, BEFORE, ids_of, prompt_of, rgb_images, runner_tokens, stacked

from missive.testing import live_server

pytest.importorskip("mlx_vlm", reason="mlx-vlm (missive-mlx[vision]) is not installed")

VISION = "tiny-gemma3-vl"
GREEDY = {"temperature": 0.0}
SYSTEM = "You look at images."


@pytest.fixture(scope="module")
def runner(gemma3_vl_dir: Path) -> Iterator[Any]:
    from missive_mlx.runner import MlxRunner
    from missive_mlx.settings import parse_settings

    r = MlxRunner(VISION, parse_settings(VISION, {"model_path": str(gemma3_vl_dir)}), 2048)
    r.load()
    yield r
    r.close()


def _reference_logits(runner: Any, prompt: Any) -> Any:
    """mlx-vlm's own forward pass of the whole prompt (its embeddings; as its
    ``generate_step``, the language model gets no mask: causal)."""
    import mlx.core as mx

    vlm = runner.vision.vlm
    ids = ids_of(runner, prompt)
    features = vlm.get_input_embeddings(ids, stacked(prompt, "pixel_values"), mask=mx.ones(ids.shape))
    out = vlm.language_model(ids, inputs_embeds=features.inputs_embeds, cache=vlm.language_model.make_cache())
    return out.logits[0, -1].astype(mx.float32)


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


def test_logits_equal_mlx_vlm_in_one_pass_and_from_a_cached_prefix(runner: Any) -> None:
    import mlx.core as mx

    prompt = prompt_of(runner, [png(100, 60, (200, 10, 10)), png(60, 90, (10, 200, 10))])
    first, second = prompt.media.spans
    reference = _reference_logits(runner, prompt)
    # one pass; past both images; inside an image; between them
    for split in (1, second.end + 2, first.start + 2, first.end + 1):
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


def test_greedy_tokens_equal_mlx_vlm_generate_and_the_cache_reads_the_image(runner: Any) -> None:
    import mlx.core as mx
    from mlx_vlm.generate.ar import generate_step

    n = 8
    prompt = prompt_of(runner, [png(90, 70, (40, 80, 120), noise=3)])
    (span,) = prompt.media.spans
    ids = ids_of(runner, prompt)
    reference = [
        int(token)
        for token, _ in generate_step(
            ids,
            runner.vision.vlm,
            stacked(prompt, "pixel_values"),
            mx.ones(ids.shape),
            max_tokens=n,
            temperature=0.0,
        )
    ]
    got, reused = runner_tokens(runner, prompt, n)
    assert got and got == reference[: len(got)], (got, reference)
    assert len(got) == n or got[-1] in runner.tokenizer.eos_token_ids
    # the same prompt again: read from the prompt cache, image included, same tokens
    again, reused = runner_tokens(runner, prompt, n)
    assert reused > span.end and again == got
    # another image: the cached prefix stops at its first token
    other = prompt_of(runner, [png(90, 70, (40, 80, 121), noise=3)])
    assert other.tokens[: span.start] == prompt.tokens[: span.start]
    _, reused = runner_tokens(runner, other, n)
    assert reused <= span.start


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


def user(data: bytes, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [image_block(data), {"type": "text", "text": text}]}


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]]) -> tuple[Any, int]:
    """The answer and ``count_tokens``, checked equal to the usage."""
    message = client.messages.create(
        model=VISION, max_tokens=4, system=SYSTEM, messages=messages, extra_body=GREEDY
    )
    counted = client.messages.count_tokens(model=VISION, system=SYSTEM, messages=messages).input_tokens
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted, (usage, counted)
    return message, counted


def test_served_image_counts_and_cache(client: anthropic.Anthropic) -> None:
    from tiny_vision import GEMMA_TOKENS_PER_IMAGE

    x, y = png(200, 140, (10, 20, 30), noise=7), png(200, 140, (10, 20, 31), noise=7)
    first, total = ask(client, [user(x, "Which image is this?")])
    assert first.usage.output_tokens >= 1
    _, small = ask(client, [user(png(20, 300, (1, 2, 3)), "Which image is this?")])
    assert small == total  # every image takes mm_tokens_per_image soft tokens
    text_only = client.messages.count_tokens(
        model=VISION, system=SYSTEM, messages=[{"role": "user", "content": "Which image is this?"}]
    ).input_tokens
    # the soft tokens, <start_of_image>, <end_of_image>, and the "\n\n" around them
    assert total - text_only >= GEMMA_TOKENS_PER_IMAGE + 2 + 2
    again, _ = ask(client, [user(x, "Which image is this?")])
    assert again.usage.cache_read_input_tokens == total - 1  # all but the last token
    other, other_total = ask(client, [user(y, "Which image is this?")])
    assert other_total == total
    # the prefix stops at the image: its tokens, <end_of_image> and the text after are read anew
    assert other.usage.input_tokens > GEMMA_TOKENS_PER_IMAGE + 1
    assert (other.usage.cache_read_input_tokens or 0) < total - GEMMA_TOKENS_PER_IMAGE - 1
