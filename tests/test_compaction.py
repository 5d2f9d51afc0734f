"""Compaction (``compaction: {"type": "summarize"}``) through the official SDK
(core/missive/context_management/compaction.py): the model writes the summary, the
response is one signed ``compaction`` block (``stop_reason: "compaction"``),
stream and non-stream alike; the next request sends the block first and
continues from it; blocks the API refuses get its errors with
``error.details.error_code``. On the echo driver (scripted, and
``settings.report`` to see the prompt) and on the real default model.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.types import (
    CompactionContentMismatchError,
    CompactionContentMismatchErrorDetails,
    CompactionSignatureInvalidError,
    CompactionSignatureInvalidErrorDetails,
)

from missive.context_management.compaction import SUMMARY_HEADER, SUMMARY_PROMPT
from missive.testing import in_process_app
from missive.thinking.signing import COMPACTION_PREFIX, Signer

KEY = "compaction-test-key-0123456789"
#: The echo "model" summarises: it plays this when it sees the summarisation
#: prompt, answers from a summary when it sees one, calls ``lookup`` when asked
#: about tea (the tool runner's first turn), and else echoes.
SUMMARY_SCRIPT = [
    {"match": SUMMARY_PROMPT[:40], "script": [{"text": "Ada "}, {"text": "likes tea."}]},
    {"match": SUMMARY_HEADER, "script": [{"text": "Continuing from the summary."}]},
    {
        "match": "Tell me about tea.",
        "script": [{"tool_call": {"name": "lookup", "id": "call_1", "arguments": ['{"q": "tea"}']}}],
    },
]
CONFIG: dict[str, Any] = {
    "thinking": {"signing_key": KEY},
    "models": {
        "echo": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {
                "script_file": "SCRIPT",
                "capabilities": {"tool_choice": ["auto", "any", "tool", "none"]},
            },
        },
        "report": {
            "driver": "echo",
            "context_window": 10_000,
            "settings": {"report": True, "capabilities": {"tool_choice": ["auto", "none"]}},
        },
    },
}
SUMMARIZE = {"type": "summarize"}
GREEDY = {"temperature": 0.0}  # an answer that lasts and has content
BETA = ["compact-2026-09-04"]


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    path = tmp_path_factory.mktemp("compaction") / "script.json"
    path.write_text(json.dumps(SUMMARY_SCRIPT))
    config = json.loads(json.dumps(CONFIG).replace('"SCRIPT"', json.dumps(str(path))))
    with in_process_app(config) as app:
        yield app.sdk(timeout=120)


def conversation(last: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "My name is Ada and I like tea."},
        {"role": "assistant", "content": "Nice to meet you, Ada."},
        {"role": "user", "content": last},
    ]


def test_compaction_returns_one_signed_block_stream_and_not(client: anthropic.Anthropic) -> None:
    summary = "Ada likes tea."
    messages = conversation("What do you know about me?")
    kwargs: dict[str, Any] = dict(
        model="echo", max_tokens=100, messages=messages, compaction=SUMMARIZE, betas=BETA
    )
    plain = client.beta.messages.create(**kwargs)
    with client.beta.messages.stream(**kwargs) as stream:
        streamed = stream.get_final_message()
    for msg in (plain, streamed):
        assert msg.stop_reason == "compaction"
        [block] = msg.content
        assert block.type == "compaction" and block.content == summary
        assert Signer(KEY.encode()).verify_compaction(block.signature, summary)
        assert msg.usage.output_tokens == 2
    assert streamed.model_dump(exclude={"id"}) == plain.model_dump(exclude={"id"})


def test_summarisation_prompt_and_the_next_request_continue_from_the_block(
    client: anthropic.Anthropic,
) -> None:
    first = client.beta.messages.create(
        model="report",
        max_tokens=100,
        messages=conversation("Please summarise."),
        compaction=SUMMARIZE,
        betas=BETA,
    )
    [block] = first.content
    assert block.type == "compaction" and block.content
    seen = json.loads(block.content)  # the report model answers with the prompt it received
    last = seen["turns"][-1]
    assert last["role"] == "user" and last["blocks"][-1]["text"].endswith(SUMMARY_PROMPT)
    # Custom instructions replace the server's prompt; blank ones count as absent.
    custom = client.beta.messages.create(
        model="report",
        max_tokens=100,
        messages=conversation("Go."),
        betas=BETA,
        compaction={"type": "summarize", "instructions": "Only list names."},
    )
    assert json.loads(custom.content[0].content)["turns"][-1]["blocks"][-1]["text"].endswith(
        "Only list names."
    )  # type: ignore[union-attr]
    # Continue: the block first, in place of what it summarises.
    follow = [first.to_param(), {"role": "user", "content": "And now?"}]
    kwargs: dict[str, Any] = dict(model="report", messages=follow, betas=BETA)
    nxt = client.beta.messages.create(max_tokens=100, **kwargs)
    turns = json.loads(nxt.content[0].text)["turns"]  # type: ignore[union-attr]
    assert [t["role"] for t in turns] == ["user"]
    assert [b["text"] for b in turns[0]["blocks"]] == [f"{SUMMARY_HEADER}\n\n{block.content}", "And now?"]
    counted = client.beta.messages.count_tokens(**kwargs)
    assert nxt.usage.input_tokens == counted.input_tokens
    # count_tokens accepts `compaction` and ignores it.
    assert (
        client.beta.messages.count_tokens(**kwargs, compaction=SUMMARIZE).input_tokens == counted.input_tokens
    )


def test_blocks_the_api_refuses(client: anthropic.Anthropic) -> None:
    signer = Signer(KEY.encode())
    good = {
        "type": "compaction",
        "content": "Ada likes tea.",
        "signature": signer.sign_compaction("Ada likes tea."),
    }
    cases = {
        "compaction_signature_invalid": [
            {
                "role": "assistant",
                "content": [
                    {**good, "signature": Signer(b"another-server-key-000").sign_compaction("Ada likes tea.")}
                ],
            },
            {"role": "user", "content": "hi"},
        ],
        "compaction_block_misplaced": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [good]},
            {"role": "user", "content": "again"},
        ],
        "compaction_block_ambiguous": [
            {"role": "assistant", "content": [good, good]},
            {"role": "user", "content": "hi"},
        ],
    }
    for code, messages in cases.items():
        with pytest.raises(anthropic.BadRequestError) as raised:
            client.beta.messages.create(model="echo", max_tokens=10, messages=messages, betas=BETA)
        assert raised.value.body["error"]["details"]["error_code"] == code, raised.value.body  # type: ignore[index]
    # A compaction request that ends with unanswered tool calls.
    pending = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "f", "input": {}}]},
    ]
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.beta.messages.create(
            model="echo",
            max_tokens=10,
            messages=pending,
            compaction=SUMMARIZE,
            betas=BETA,
            tools=[{"name": "f", "input_schema": {"type": "object"}}],
        )
    assert raised.value.body["error"]["details"]["error_code"] == "compaction_incomplete_turn"  # type: ignore[index]
    # A failed compaction (content null) is a no-op.
    noop = [
        {"role": "assistant", "content": [{"type": "compaction", "content": None}]},
        {"role": "user", "content": "hi there"},
    ]
    assert (
        client.beta.messages.create(model="echo", max_tokens=10, messages=noop, betas=BETA).content[0].text
        == "hi there"
    )  # type: ignore[union-attr]


def refused(client: anthropic.Anthropic, block: dict[str, Any]) -> anthropic.BadRequestError:
    """The error of a request sending ``block`` back first."""
    messages = [{"role": "assistant", "content": [block]}, {"role": "user", "content": "hi"}]
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.beta.messages.create(model="echo", max_tokens=10, messages=messages, betas=BETA)
    return raised.value


def test_edited_content_under_a_genuine_signature_is_a_content_mismatch(client: anthropic.Anthropic) -> None:
    """The signature records the content's digest (SDK 2.16
    ``CompactionContentMismatchError``): text edited under this server's
    signature is told apart from a signature this server never made."""
    signer = Signer(KEY.encode())
    good = {
        "type": "compaction",
        "content": "Ada likes tea.",
        "signature": signer.sign_compaction("Ada likes tea."),
    }
    error = refused(client, {**good, "content": "Ada likes coffee."})
    assert isinstance(error, CompactionContentMismatchError)
    assert error.status_code == 400
    assert isinstance(error.details, CompactionContentMismatchErrorDetails)
    assert error.details.error_code == error.error_code == "compaction_content_mismatch"
    body: Any = error.body
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(
        "messages.0.content.0: the `compaction` block's `content` differs"
    )
    # Forged: another key's signature, or this server's MAC with the edited text's digest put in.
    other = Signer(b"another-server-key-000").sign_compaction("Ada likes coffee.")
    payload = good["signature"].removeprefix(COMPACTION_PREFIX)
    raw = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
    swapped = raw[:32] + hashlib.sha256(b"Ada likes coffee.").digest()
    forged = COMPACTION_PREFIX + base64.urlsafe_b64encode(swapped).decode().rstrip("=")
    for signature in (other, forged, COMPACTION_PREFIX + "AAAA", "msvc1.AAAA", None):
        block = {**good, "content": "Ada likes coffee."}
        if signature is not None:
            block["signature"] = signature
        else:
            del block["signature"]
        error = refused(client, block)
        assert isinstance(error, CompactionSignatureInvalidError), signature
        assert isinstance(error.details, CompactionSignatureInvalidErrorDetails)
        assert "Invalid `signature` in `compaction` block" in error.body["error"]["message"]  # type: ignore[index]
    # Untouched, the block is used.
    messages = [{"role": "assistant", "content": [good]}, {"role": "user", "content": "What do I like?"}]
    answer = client.beta.messages.create(model="echo", max_tokens=20, messages=messages, betas=BETA)
    assert answer.content[0].text == "Continuing from the summary."  # type: ignore[union-attr]


def test_signatures_from_before_the_digest_still_verify(client: anthropic.Anthropic) -> None:
    """``msvc1.`` signatures (an HMAC over the content, no digest) keep
    working for their content; edited, they can only be "invalid"."""
    mac = hmac.new(KEY.encode(), digestmod=hashlib.sha256)
    for part in (b"missive-compaction-v1", b"Ada likes tea."):
        mac.update(len(part).to_bytes(8, "big"))
        mac.update(part)
    old = "msvc1." + base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")
    block = {"type": "compaction", "content": "Ada likes tea.", "signature": old}
    messages = [{"role": "assistant", "content": [block]}, {"role": "user", "content": "What do I like?"}]
    answer = client.beta.messages.create(model="echo", max_tokens=20, messages=messages, betas=BETA)
    assert answer.content[0].text == "Continuing from the summary."  # type: ignore[union-attr]
    error = refused(client, {**block, "content": "Ada likes coffee."})
    assert isinstance(error, CompactionSignatureInvalidError)


def test_the_sdk_tool_runner_compacts_and_carries_on(client: anthropic.Anthropic) -> None:
    """The SDK's own flow: ``runner.compact_before_next_turn()`` sends the
    history with ``compaction``, puts the answer in place of the history,
    and the next request continues from the block alone."""
    from anthropic import beta_tool

    @beta_tool
    def lookup(q: str) -> str:
        """Look a word up."""
        return f"{q} is a drink"

    runner = client.beta.messages.tool_runner(
        model="echo",
        max_tokens=100,
        tools=[lookup],
        thread=False,
        betas=BETA,
        messages=[{"role": "user", "content": "Tell me about tea."}],
    )
    seen = []
    for message in runner:
        seen.append(message)
        if len(seen) == 1:
            runner.compact_before_next_turn()
    assert [m.stop_reason for m in seen] == ["tool_use", "compaction", "end_turn"]
    block = seen[1].content[0]
    assert block.type == "compaction" and block.content == "Ada likes tea."
    assert seen[2].content[0].text == "Continuing from the summary."  # type: ignore[union-attr]


def test_compaction_round_trip_on_the_default_model(smol: anthropic.Anthropic) -> None:
    """SmolLM2 writes the summary; the next request continues from it and
    its usage matches count_tokens."""
    talk = [
        {"role": "user", "content": "My name is Ada. I live in Paris and I have a cat named Tom."},
        {"role": "assistant", "content": "Nice to meet you, Ada! Paris is lovely, and Tom sounds sweet."},
        {"role": "user", "content": "I also play the violin."},
        {"role": "assistant", "content": "How wonderful! The violin is a beautiful instrument."},
    ]
    # The conversation as the client last sent it: its prompt is in the model's cache...
    smol.beta.messages.create(
        model="smollm2-135m", max_tokens=0, messages=[*talk, {"role": "user", "content": "ok"}], betas=BETA
    )
    first = smol.beta.messages.create(
        model="smollm2-135m",
        max_tokens=120,
        messages=talk,
        compaction=SUMMARIZE,
        betas=BETA,
        extra_body=GREEDY,
    )
    # ...and the summarisation prompt starts with it: the prefix is reused.
    assert (first.usage.cache_read_input_tokens or 0) > 0
    assert first.stop_reason in ("compaction", "max_tokens")
    [block] = first.content
    assert block.type == "compaction" and block.content and block.signature
    follow: list[Any] = [first.to_param(), {"role": "user", "content": "What is my name?"}]
    kwargs: dict[str, Any] = dict(model="smollm2-135m", messages=follow, betas=BETA)
    nxt = smol.beta.messages.create(max_tokens=30, extra_body=GREEDY, **kwargs)
    assert nxt.stop_reason in ("end_turn", "max_tokens") and nxt.content
    usage = nxt.usage
    total = (
        usage.input_tokens + (usage.cache_read_input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
    )
    assert total == smol.beta.messages.count_tokens(**kwargs).input_tokens
