"""Helpers of the per-family MLX vision tests (``test_mlx_vision_*.py``):
prompts with images tokenized by the runner, the arrays mlx-vlm's own
computation takes for them, greedy tokens through the runner's engine calls."""

from __future__ import annotations

import io
from typing import Any

BEFORE = "<|im_start|>user\nLook:"
AFTER = "<|im_end|>\n<|im_start|>assistant\n"
SYSTEM = "You look at images."


def prompt_of(runner: Any, images: list[bytes], text: str = " What is it?") -> Any:
    """``BEFORE``, each image's marker after a space, ``text``, ``AFTER``,
    tokenized by ``runner``."""
    from PIL import Image

    from missive.api import ImageInput, ImageMarks

    marks = ImageMarks(runner.image_marker)
    body = ""
    for data in images:
        with Image.open(io.BytesIO(data)) as opened:
            size = opened.size
        body += " " + marks.mark(ImageInput("image/png", data, *size))
    return runner.tokenize([(BEFORE + body + text, False), (AFTER, False)], marks)


def ids_of(runner: Any, prompt: Any) -> Any:
    """The prompt's token ids as the model gets them, ``(1, n)``."""
    import mlx.core as mx

    return mx.array([runner.vision.model_ids(prompt.tokens, 0, prompt.media.spans)])


def stacked(prompt: Any, key: str) -> Any:
    """The processor's ``key`` arrays of the prompt's images, concatenated."""
    import mlx.core as mx

    return mx.concatenate([mx.array(s.pixels[key]) for s in prompt.media.spans])


def rgb_images(images: list[bytes]) -> list[Any]:
    from PIL import Image

    return [Image.open(io.BytesIO(data)).convert("RGB") for data in images]


def runner_tokens(runner: Any, prompt: Any, n: int) -> tuple[list[int], int]:
    """Greedy tokens through the runner (the engine's calls: ``begin``,
    ``step``, ``end``), and the prompt tokens it read from its prompt cache."""
    from missive.api import Sampling, Sequence

    seq = Sequence(prompt=prompt, max_new=n, sampling=Sampling(temperature=0.0), cancelled=lambda: False)
    runner.begin(seq)
    out: list[int] = []
    try:
        while len(out) < n:
            token = runner.step(seq)
            if token is None:
                break
            out.append(token)
    finally:
        runner.end(seq, True)
    return out, seq.reused


def greedy_and_cache(runner: Any, prompt: Any, other: Any, reference: list[int], n: int) -> None:
    """The runner's greedy tokens for ``prompt`` equal ``reference`` (mlx-vlm's
    own), a repeat reads the image from the prompt cache, and ``other`` (the
    same text, another image) reuses nothing from the image's start on."""
    (span,) = prompt.media.spans
    got, _ = runner_tokens(runner, prompt, n)
    assert got and got == reference[: len(got)], (got, reference)
    assert len(got) == n or got[-1] in runner.tokenizer.eos_token_ids
    again, reused = runner_tokens(runner, prompt, n)
    assert reused > span.end and again == got
    assert other.tokens[: span.start] == prompt.tokens[: span.start]
    _, reused = runner_tokens(runner, other, n)
    assert reused <= span.start


def user(data: bytes, text: str) -> dict[str, Any]:
    """A user turn of one image and a text."""
    from test_mlx_vision import image_block

    return {"role": "user", "content": [image_block(data), {"type": "text", "text": text}]}


def ask(client: Any, model: str, messages: list[dict[str, Any]]) -> tuple[Any, int]:
    """The answer (greedy, 4 tokens, :data:`SYSTEM`) and ``count_tokens``,
    checked equal to the usage."""
    message = client.messages.create(
        model=model, max_tokens=4, system=SYSTEM, messages=messages, extra_body={"temperature": 0.0}
    )
    counted = client.messages.count_tokens(model=model, system=SYSTEM, messages=messages).input_tokens
    usage = message.usage
    assert usage.input_tokens + (usage.cache_read_input_tokens or 0) == counted, (usage, counted)
    return message, counted
