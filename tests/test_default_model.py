"""The embedded default (SmolLM2-135M on CPU via llama.cpp) answering for real,
through the official SDK, as the README serves it (``missive serve``, no config)."""

from __future__ import annotations

import asyncio
import time

import anthropic
import httpx

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0}
QUESTION = [{"role": "user", "content": "List three colours of the rainbow."}]


def test_plain_answer(smol: anthropic.Anthropic) -> None:
    msg = smol.messages.create(model=MODEL, max_tokens=40, messages=QUESTION, extra_body=GREEDY)
    assert msg.content[0].type == "text" and msg.content[0].text.strip()
    assert msg.stop_reason in ("end_turn", "max_tokens")
    assert msg.usage.input_tokens + msg.usage.cache_read_input_tokens > 10
    assert 0 < msg.usage.output_tokens <= 40
    assert msg.model == MODEL and msg.id.startswith("msg_")


def test_stream_matches_non_stream_and_count_tokens(smol: anthropic.Anthropic) -> None:
    kwargs = dict(model=MODEL, max_tokens=30, messages=QUESTION, extra_body=GREEDY)
    plain = smol.messages.create(**kwargs)
    with smol.messages.stream(**kwargs) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert streamed == final.content[0].text == plain.content[0].text
    assert final.usage.output_tokens == plain.usage.output_tokens
    counted = smol.messages.count_tokens(model=MODEL, messages=QUESTION).input_tokens
    for usage in (plain.usage, final.usage):
        assert (
            counted == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )


def test_second_turn_reuses_the_prompt_prefix(smol: anthropic.Anthropic) -> None:
    system = "You are a terse assistant. Answer in one short sentence."
    first = [{"role": "user", "content": "What is the capital of Italy?"}]
    one = smol.messages.create(model=MODEL, max_tokens=20, system=system, messages=first, extra_body=GREEDY)
    second = [
        *first,
        {"role": "assistant", "content": one.content[0].text},
        {"role": "user", "content": "And of Spain?"},
    ]
    two = smol.messages.create(model=MODEL, max_tokens=20, system=system, messages=second, extra_body=GREEDY)
    assert two.usage.cache_read_input_tokens > 0
    first_prompt = one.usage.input_tokens + one.usage.cache_read_input_tokens
    assert two.usage.cache_read_input_tokens >= first_prompt - 2
    counted = smol.messages.count_tokens(model=MODEL, system=system, messages=second).input_tokens
    assert counted == two.usage.input_tokens + two.usage.cache_read_input_tokens


def test_max_tokens(smol: anthropic.Anthropic) -> None:
    msg = smol.messages.create(
        model=MODEL,
        max_tokens=3,
        messages=[{"role": "user", "content": "Tell me a long story."}],
        extra_body=GREEDY,
    )
    assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens == 3


def test_stop_sequence(smol: anthropic.Anthropic) -> None:
    kwargs = dict(model=MODEL, max_tokens=40, messages=QUESTION, extra_body=GREEDY)
    full = smol.messages.create(**kwargs).content[0].text
    words = full.split()
    assert len(words) >= 3, full
    stop = words[len(words) // 2]
    expected = full[: full.index(stop)]
    for stream in (False, True):
        if stream:
            with smol.messages.stream(stop_sequences=[stop], **kwargs) as s:
                streamed = "".join(s.text_stream)
                msg = s.get_final_message()
            assert streamed == expected
        else:
            msg = smol.messages.create(stop_sequences=[stop], **kwargs)
        assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
        assert (msg.content[0].text if msg.content else "") == expected


def test_prefill_is_continued(smol: anthropic.Anthropic) -> None:
    messages = [
        {"role": "user", "content": "What is the capital of France?"},
        {"role": "assistant", "content": "The capital of France is"},
    ]
    msg = smol.messages.create(model=MODEL, max_tokens=8, messages=messages, extra_body=GREEDY)
    assert "Paris" in msg.content[0].text
    assert not msg.content[0].text.startswith("The capital of France is")


def test_prompt_too_long(smol: anthropic.Anthropic) -> None:
    long_text = "word " * 9000  # > 8192-token context
    try:
        smol.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": long_text}])
    except anthropic.BadRequestError as exc:
        message = exc.body["error"]["message"]
        assert message.startswith("prompt is too long: ") and message.endswith(" tokens > 8191 maximum")
    else:
        raise AssertionError("expected a 400")


def test_async_client(default_url: str) -> None:
    async def run() -> anthropic.types.Message:
        async with anthropic.AsyncAnthropic(base_url=default_url, api_key="x", max_retries=0) as client:
            async with client.messages.stream(
                model=MODEL, max_tokens=10, messages=QUESTION, extra_body=GREEDY
            ) as stream:
                async for _ in stream.text_stream:
                    pass
                return await stream.get_final_message()

    assert asyncio.run(run()).usage.output_tokens > 0


def essay(max_tokens: int) -> dict:
    """A streamed request for a long answer (greedy: sampled, the model may
    end it after a few tokens, and the tests need it to last)."""
    return {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "Write a very long essay about the history of Rome."}],
    }


def test_disconnect_frees_the_model(default_url: str, smol: anthropic.Anthropic) -> None:
    """Smoke test on the real model (the exact cancellation path is tested with
    the echo driver in test_stream_grammar and in the driver's own tests)."""
    with httpx.stream("POST", f"{default_url}/v1/messages", json=essay(6000), timeout=30) as resp:
        for line in resp.iter_lines():
            if "text_delta" in line:
                break  # the client goes away mid-answer
    msg = anthropic.Anthropic(base_url=default_url, api_key="x", max_retries=0, timeout=45).messages.create(
        model=MODEL, max_tokens=5, messages=QUESTION, extra_body=GREEDY
    )
    assert msg.usage.output_tokens > 0


def test_count_tokens_does_not_wait_behind_generation(default_url: str, smol: anthropic.Anthropic) -> None:
    """A count sent while the model generates comes back before that generation ends.

    Were it queued behind the generation, it would return only after the last
    token, and the rest of the stream (already buffered) would follow at once.
    """
    first = counted_at = None
    counted = None
    with httpx.stream("POST", f"{default_url}/v1/messages", json=essay(300), timeout=120) as resp:
        for line in resp.iter_lines():
            if "text_delta" in line and counted is None:
                first = time.monotonic()
                counted = smol.messages.count_tokens(model=MODEL, messages=QUESTION).input_tokens
                counted_at = time.monotonic()
        ended = time.monotonic()
    assert counted and counted > 10
    assert first is not None and counted_at is not None
    assert counted_at - first < (ended - first) / 2


def test_model_discovery_finds_a_claude_named_id(smol: anthropic.Anthropic) -> None:
    """Claude Code's gateway model discovery and Claude Desktop keep only ids
    starting with claude or anthropic (issue 15 item 5): the default
    configuration lists one, and it answers."""
    ids = [m.id for m in smol.models.list(limit=1000)]
    assert ids[0] == MODEL
    claude_ids = [i for i in ids if i.startswith(("claude", "anthropic"))]
    assert claude_ids == ["claude-smollm2-135m"]
    assert smol.models.retrieve(claude_ids[0]).display_name
    reply = smol.messages.create(
        model=claude_ids[0], max_tokens=3, messages=[{"role": "user", "content": "Hi"}], extra_body=GREEDY
    )
    assert reply.model == claude_ids[0] and reply.usage.output_tokens > 0


def test_a_huge_prompt_does_not_hold_the_model(default_url: str, smol: anthropic.Anthropic) -> None:
    """Tokenizing a prompt of several megabytes takes seconds; it happens
    outside the model's slot, so a small request sent meanwhile is answered
    while the huge one is still being tokenized (which then ends in
    prompt_too_long without ever queueing). Found by a newcomer: a 30 MB body
    held every other request for 53 s."""
    import threading

    outcome: dict[str, int] = {}

    def huge() -> None:
        body = {
            "model": MODEL,
            "max_tokens": 5,
            "messages": [{"role": "user", "content": "lorem ipsum " * 500_000}],
        }
        outcome["status"] = httpx.post(f"{default_url}/v1/messages", json=body, timeout=600).status_code

    thread = threading.Thread(target=huge)
    thread.start()
    try:
        time.sleep(1.0)  # the huge body is sent and being tokenized (it takes several seconds)
        reply = smol.messages.create(
            model=MODEL, max_tokens=3, messages=[{"role": "user", "content": "Hi"}], extra_body=GREEDY
        )
        assert reply.usage.output_tokens > 0
        assert thread.is_alive(), "the small request waited for the huge one's tokenization"
    finally:
        thread.join(timeout=600)
    assert outcome["status"] == 400
