"""Images on MLX vision models (:mod:`missive_mlx.vision`), on a tiny
random-weight Qwen2.5-VL (:mod:`tiny_vision`) with SmolLM2's tokenizer.

* placement: the image's tokens are the processor's expansion (Qwen2-VL's
  ``smart_resize`` rule, written out here), and the logits of the prompt's
  last token, read in one pass or from a cached prefix, equal mlx-vlm's own
  forward pass (its ``get_input_embeddings`` and M-RoPE positions); wrong
  positions are told apart;
* served through the SDK: an image request is answered (stream and not),
  ``count_tokens`` equals the usage, the same image is read from the cache,
  a different one is not (past its start), a bad image is a 400 envelope; a
  text-only MLX model refuses images with the core's 400 naming the
  capability.

The answers are random tokens: only the plumbing is checked.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import live_server

pytest.importorskip("mlx_vlm", reason="mlx-vlm (missive-mlx[vision]) is not installed")

VISION = "tiny-vl"
TEXT = "smollm2-mlx"
GREEDY = {"temperature": 0.0}
SYSTEM = "You look at images."


def png(width: int, height: int, color: tuple[int, int, int], *, noise: int = 0) -> bytes:
    from PIL import Image

    image = Image.new("RGB", (width, height), color)
    if noise:
        image.putpixel((noise % width, 0), (noise % 256, 0, 0))
    out = io.BytesIO()
    image.save(out, format="PNG")
    return out.getvalue()


def qwen_tokens(width: int, height: int) -> int:
    """Image tokens of a ``width x height`` image for the tiny model's
    processor: transformers' Qwen2-VL ``smart_resize`` (factor 28 = patch 14
    x merge 2, ``min_pixels`` 3136, ``max_pixels`` 28 * 28 * 64), then one
    token per 28 x 28 pixels."""
    from tiny_vision import QWEN_MAX_PIXELS

    factor, low, high = 28, 56 * 56, QWEN_MAX_PIXELS
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > high:
        beta = math.sqrt(height * width / high)
        h, w = (
            max(factor, math.floor(height / beta / factor) * factor),
            max(factor, math.floor(width / beta / factor) * factor),
        )
    elif h * w < low:
        beta = math.sqrt(low / (height * width))
        h, w = math.ceil(height * beta / factor) * factor, math.ceil(width * beta / factor) * factor
    return (h // factor) * (w // factor)


# -- the runner, in process ------------------------------------------------------


@pytest.fixture(scope="module")
def runner(qwen_vl_dir: Path) -> Iterator[Any]:
    from missive_mlx.runner import MlxRunner
    from missive_mlx.settings import parse_settings

    r = MlxRunner(VISION, parse_settings(VISION, {"model_path": str(qwen_vl_dir)}), 2048)
    r.load()
    yield r
    r.close()


def _prompt(runner: Any, images: list[bytes], text: str = " What is it?") -> Any:
    from PIL import Image

    from missive.api import ImageInput, ImageMarks

    marks = ImageMarks(runner.image_marker)
    body = "Look:"
    for data in images:
        with Image.open(io.BytesIO(data)) as opened:
            size = opened.size
        body += " " + marks.mark(ImageInput("image/png", data, *size))
    pieces = [
        ("<|im_start|>user\n", False),
        (body + text, False),
        ("<|im_end|>\n<|im_start|>assistant\n", False),
    ]
    return runner.tokenize(pieces, marks)


def _last_logits(runner: Any, prompt: Any, split: int) -> Any:
    """Logits of the prompt's last token through the driver's path: the
    tokens before ``split`` into a fresh cache, then the rest."""
    import mlx.core as mx

    lm = runner.model
    cache = lm.make_cache()
    logits = None
    for start, end in ((0, split), (split, len(prompt.tokens))):
        ids, embeds = runner.vision.inputs(prompt, start, prompt.tokens[start:end])
        logits = lm(ids[None], cache=cache, input_embeddings=None if embeds is None else embeds[None])
    assert logits is not None
    return logits[0, -1].astype(mx.float32)


def _reference_logits(runner: Any, prompt: Any) -> Any:
    """mlx-vlm's own forward pass of the whole prompt (its embeddings and positions)."""
    import mlx.core as mx

    vlm = runner.vision.vlm
    ids = mx.array([[runner.vision.image_token if t < 0 else t for t in prompt.tokens]])
    spans = prompt.media.spans
    pixels = mx.concatenate([mx.array(s.pixels["pixel_values"]) for s in spans])
    grids = mx.concatenate([mx.array(s.pixels["image_grid_thw"]) for s in spans])
    features = vlm.get_input_embeddings(ids, pixels, image_grid_thw=grids)
    cache = runner.model.make_cache()
    out = vlm.language_model(
        ids, inputs_embeds=features.inputs_embeds, cache=cache, position_ids=features.position_ids
    )
    return out.logits[0, -1].astype(mx.float32)


def test_image_tokens_are_the_processors_expansion(runner: Any) -> None:
    for width, height in ((100, 60), (300, 200), (31, 500)):
        prompt = _prompt(runner, [png(width, height, (9, 99, 199))])
        (span,) = prompt.media.spans
        assert span.n_tokens == qwen_tokens(width, height), (width, height)
        vocab = runner.tokenizer.get_vocab()
        assert prompt.tokens[span.start - 1] == vocab["<|vision_start|>"]
        assert prompt.tokens[span.end] == vocab["<|vision_end|>"]
        assert len(set(prompt.tokens[span.start : span.end])) == 1 and prompt.tokens[span.start] < 0


def test_logits_equal_mlx_vlm_in_one_pass_and_from_a_cached_prefix(runner: Any) -> None:
    import mlx.core as mx

    prompt = _prompt(runner, [png(100, 60, (200, 10, 10)), png(60, 90, (10, 200, 10))])
    first, second = prompt.media.spans
    reference = _reference_logits(runner, prompt)
    # one pass; a prefix ending after the images (M-RoPE delta); inside an image; between them
    for split in (1, second.end + 2, first.start + 3, first.end + 1):
        got = _last_logits(runner, prompt, split)
        assert mx.allclose(got, reference, atol=1e-4).item(), split
    # the check tells wrong positions apart: the images' rows numbered as text
    lm = runner.model
    saved = lm._positions
    try:
        lm._positions = lambda offset, length: mx.broadcast_to(
            mx.arange(offset, offset + length)[None, None, :], (3, 1, length)
        )
        lm.prompt = None
        wrong = _last_logits(runner, prompt, 1)
    finally:
        lm._positions = saved
    assert not mx.allclose(wrong, reference, atol=1e-4).item()


def test_same_image_same_id_other_image_other_id(runner: Any) -> None:
    a = _prompt(runner, [png(100, 60, (1, 2, 3))])
    b = _prompt(runner, [png(100, 60, (1, 2, 3))])
    c = _prompt(runner, [png(100, 60, (1, 2, 4))])
    assert a.tokens == b.tokens
    (span,) = a.media.spans
    assert a.tokens[: span.start] == c.tokens[: span.start] and a.tokens[span.start] != c.tokens[span.start]


# -- served ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def url(qwen_vl_dir: Path, mlx_model_dir: Path) -> Iterator[str]:
    config = {
        "models": {
            VISION: {"driver": "mlx", "context_window": 2048, "settings": {"model_path": str(qwen_vl_dir)}},
            TEXT: {"driver": "mlx", "context_window": 2048, "settings": {"model_path": str(mlx_model_dir)}},
        }
    }
    with live_server(config, timeout=300) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=300)


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()},
    }


def user(data: bytes, text: str) -> dict[str, Any]:
    return {"role": "user", "content": [image_block(data), {"type": "text", "text": text}]}


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], model: str = VISION) -> tuple[Any, int]:
    """The answer and ``count_tokens``, checked equal to the usage."""
    message = client.messages.create(
        model=model, max_tokens=4, system=SYSTEM, messages=messages, extra_body=GREEDY
    )
    counted = client.messages.count_tokens(model=model, system=SYSTEM, messages=messages).input_tokens
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted, (usage, counted)
    return message, counted


def test_image_request_answered(client: anthropic.Anthropic) -> None:
    message, counted = ask(client, [user(png(120, 80, (30, 60, 90)), "What colour is this?")])
    assert message.stop_reason in ("end_turn", "max_tokens")
    assert message.usage.output_tokens >= 1
    text_only = client.messages.count_tokens(
        model=VISION, system=SYSTEM, messages=[{"role": "user", "content": "What colour is this?"}]
    ).input_tokens
    # the image's tokens, <|vision_start|>, <|vision_end|>, and the newline
    # that joins the image's part to the text (Turn.text)
    assert counted - text_only == qwen_tokens(120, 80) + 3


def test_image_request_streamed(client: anthropic.Anthropic) -> None:
    messages = [user(png(64, 64, (250, 250, 0)), "Describe it.")]
    with client.messages.stream(
        model=VISION, max_tokens=4, system=SYSTEM, messages=messages, extra_body=GREEDY
    ) as s:
        events = [e.type for e in s]
        final = s.get_final_message()
    assert events[0] == "message_start" and events[-1] == "message_stop"
    counted = client.messages.count_tokens(model=VISION, system=SYSTEM, messages=messages).input_tokens
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == counted
    assert final.usage.output_tokens >= 1


def test_same_image_read_from_cache_other_image_not(client: anthropic.Anthropic) -> None:
    x, y = png(200, 140, (10, 20, 30), noise=7), png(200, 140, (10, 20, 31), noise=7)
    n = qwen_tokens(200, 140)
    first, total = ask(client, [user(x, "Which image is this?")])
    again, _ = ask(client, [user(x, "Which image is this?")])
    assert again.usage.cache_read_input_tokens == total - 1  # all but the last token
    turns = [
        user(x, "Which image is this?"),
        {"role": "assistant", "content": first.content[0].text if first.content else "ok"},
        {"role": "user", "content": "And now?"},
    ]
    later, _ = ask(client, turns)
    assert later.usage.cache_read_input_tokens >= total  # the first prompt, image included
    other, other_total = ask(client, [user(y, "Which image is this?")])
    assert other_total == total
    # the prefix stops at the image: its n tokens, <|vision_end|> and the text after are read anew
    assert other.usage.cache_read_input_tokens < total - n - 1
    assert other.usage.input_tokens > n


def test_text_only_mlx_model_refuses_images(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model=TEXT, max_tokens=4, messages=[user(png(32, 32, (0, 0, 0)), "Hi")])
    body = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    message = body["error"]["message"]
    assert "image/png" in message and "not supported" in message and TEXT in message


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(png(2, 500, (5, 5, 5)), id="aspect-over-200"),  # Qwen's smart_resize refuses it
        pytest.param(png(40, 40, (5, 5, 5))[:60], id="truncated"),
    ],
)
def test_bad_image_is_a_400_envelope(client: anthropic.Anthropic, data: bytes) -> None:
    for name in ("create", "count_tokens"):
        kwargs: dict[str, Any] = {"max_tokens": 4} if name == "create" else {}
        with pytest.raises(anthropic.BadRequestError) as info:
            getattr(client.messages, name)(model=VISION, messages=[user(data, "What is it?")], **kwargs)
        body = info.value.body
        assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error", body
    # the model still answers afterwards
    message, _ = ask(client, [user(png(50, 50, (1, 1, 1)), "And this?")])
    assert message.usage.output_tokens >= 1
