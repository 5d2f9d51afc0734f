"""Speculative decoding in the embedded engine (``settings.speculative``,
:mod:`missive_llamacpp.speculative`), through the SDK against a live server
that serves the embedded SmolLM2 twice: ``spec`` with prompt-lookup
drafting (the default) and ``plain`` without.

* greedy answers are the same with and without it (up to near ties,
  :func:`greedy_reference.assert_same_greedy_answer`), for an edit-like
  prompt (its answer copies the prompt: drafts get accepted, which
  ``/metrics`` shows) and free prose, with 1 and with 4 concurrent streams;
* ``max_tokens`` is exact with drafts, a stop sequence inside a copied run
  cuts there, the end of generation inside a copied run ends it, usage is
  exact, a forced tool call (a grammar in the sampler) still parses;
* the status reports the counters.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import anthropic
import httpx
import pytest
from greedy_reference import assert_same_greedy_answer

from missive.testing import live_server, serve_process
from missive_llamacpp.plugin import default_model_path

DEADLINE = 600.0  # seconds; a hang guard only
GREEDY = {"temperature": 0.0}

#: A small file the edit prompt asks the model to copy with one change.
SOURCE = '''def parse_line(line):
    name, _, value = line.partition("=")
    return name.strip(), value.strip()


def read_config(path):
    settings = {}
    with open(path) as handle:
        for line in handle:
            if line.strip() and not line.startswith("#"):
                name, value = parse_line(line)
                settings[name] = value
    return settings


def write_config(path, settings):
    with open(path, "w") as handle:
        for name, value in sorted(settings.items()):
            handle.write(f"{name} = {value}\\n")
'''
EDIT = (
    "Here is a Python file:\n\n```python\n" + SOURCE + "```\n\n"
    "Rewrite the whole file with the function read_config renamed to load_config. "
    "Answer with the complete file only."
)
#: Pieces of SOURCE its copy is expected to hold, the stop sequence's candidates.
COPIED = ["sorted(settings.items())", "value.strip()", "settings[name]", 'open(path, "w")']
PROSE = "Write a long story about a dragon."
ECHO = "Repeat this sentence exactly, and nothing else: The quick brown fox jumps over the lazy dog."
WEATHER = {
    "name": "get_weather",
    "description": "The current weather in a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


def entry(**settings: Any) -> dict[str, Any]:
    return {
        "driver": "llamacpp",
        "context_window": 2048,
        "settings": {"model_path": str(default_model_path()), "parallel": 4, **settings},
    }


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with live_server(
        {"models": {"spec": entry(speculative="ngram"), "plain": entry(speculative="off")}}
    ) as base:
        yield base


@pytest.fixture(scope="module")
def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=DEADLINE)


def params(model: str, prompt: str, max_tokens: int = 200, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": prompt}],
        "extra_body": GREEDY,
        **extra,
    }


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if block.type == "text")


def counted(client: anthropic.Anthropic, p: dict[str, Any]) -> int:
    fields = {k: p[k] for k in ("model", "messages", "system", "tools") if k in p}
    return client.messages.count_tokens(**fields).input_tokens


def drafts(url: str) -> tuple[float, float]:
    """``spec``'s draft tokens verified and accepted, from ``/metrics``."""
    body = httpx.get(f"{url}/metrics", timeout=30).text
    found = {}
    for name in ("draft", "accepted"):
        match = re.search(
            rf'^missive:spec_decode_num_{name}_tokens_total\{{model_name="spec"\}} (\S+)$', body, re.M
        )
        assert match, f"no {name} counter for model spec in /metrics"
        found[name] = float(match.group(1))
    assert 'spec_decode_num_draft_tokens_total{model_name="plain"} 0.0' in body  # it never drafts
    return found["draft"], found["accepted"]


def concurrently(*calls: Callable[[], Any]) -> list[Any]:
    barrier = threading.Barrier(len(calls))

    def released(call: Callable[[], Any]) -> Any:
        barrier.wait(DEADLINE)
        return call()

    with ThreadPoolExecutor(len(calls)) as pool:
        return [f.result(DEADLINE) for f in [pool.submit(released, c) for c in calls]]


def check_same(
    client: anthropic.Anthropic,
    got: anthropic.types.Message,
    wanted: anthropic.types.Message,
    p: dict[str, Any],
    what: str,
) -> None:
    """``got`` (with speculation) is ``wanted``'s greedy answer (up to a
    near tie), with the same stop reason and output tokens when equal, and
    exact input usage."""
    n = counted(client, p)
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == n, (what, got.usage, n)
    if assert_same_greedy_answer(text_of(got), text_of(wanted), p["messages"], None, n, what):
        assert got.stop_reason == wanted.stop_reason, what
        assert got.usage.output_tokens == wanted.usage.output_tokens, what


@pytest.fixture(scope="module")
def plain_answers(client: anthropic.Anthropic) -> dict[str, anthropic.types.Message]:
    """The edit and prose prompts answered without speculation, alone."""
    return {prompt: client.messages.create(**params("plain", prompt)) for prompt in (EDIT, PROSE)}


def test_greedy_answers_are_the_same_with_speculation_and_drafts_are_accepted(
    url: str, client: anthropic.Anthropic, plain_answers: dict[str, anthropic.types.Message]
) -> None:
    before = drafts(url)
    edit = client.messages.create(**params("spec", EDIT))
    after = drafts(url)
    assert after[0] > before[0], "the edit prompt drafted nothing"
    assert after[1] > before[1], "no draft token of the edit prompt was accepted"
    assert after[1] - before[1] <= after[0] - before[0]
    check_same(client, edit, plain_answers[EDIT], params("spec", EDIT), "edit, one stream")
    prose = client.messages.create(**params("spec", PROSE))
    check_same(client, prose, plain_answers[PROSE], params("spec", PROSE), "prose, one stream")


def test_four_concurrent_streams_answer_as_without_speculation(
    url: str, client: anthropic.Anthropic, plain_answers: dict[str, anthropic.types.Message]
) -> None:
    prompts = [EDIT, PROSE, EDIT, PROSE]

    def streamed(prompt: str) -> anthropic.types.Message:
        with client.messages.stream(**params("spec", prompt)) as stream:
            return stream.get_final_message()

    before = drafts(url)
    replies = concurrently(*(lambda p=p: streamed(p) for p in prompts))
    assert drafts(url)[1] > before[1], "four streams: no draft token accepted"
    for prompt, reply in zip(prompts, replies, strict=True):
        check_same(client, reply, plain_answers[prompt], params("spec", prompt), f"4 streams: {prompt[:20]}")


def test_max_tokens_is_exact_with_drafts(client: anthropic.Anthropic) -> None:
    for limit in (1, 2, 37):
        p = params("spec", EDIT, max_tokens=limit)
        reply = client.messages.create(**p)
        assert reply.stop_reason == "max_tokens", (limit, reply)
        assert reply.usage.output_tokens == limit, (limit, reply.usage)
        check_same(
            client,
            reply,
            client.messages.create(**params("plain", EDIT, max_tokens=limit)),
            p,
            f"max_tokens {limit}",
        )


def test_a_stop_sequence_inside_a_copied_run_cuts_there(
    client: anthropic.Anthropic, plain_answers: dict[str, anthropic.types.Message]
) -> None:
    wanted = text_of(plain_answers[EDIT])
    # A piece of the file the answer copies, past its first line (drafts are
    # accepted by then).
    copied = [piece for piece in COPIED if piece in wanted[20:]]
    if not copied:
        pytest.fail(f"the plain answer copies none of {COPIED}: {wanted!r}")
    stop = copied[0]
    p = params("spec", EDIT, stop_sequences=[stop])
    got = client.messages.create(**p)
    plain = client.messages.create(**params("plain", EDIT, stop_sequences=[stop]))
    # Equal texts have equal stop reasons and output tokens; a parting is
    # allowed only at a near tie (the cached prompt is read in other batches).
    check_same(client, got, plain, p, "stop sequence")
    for reply in (got, plain):
        assert stop not in text_of(reply), (stop, text_of(reply))
        if reply.stop_reason == "stop_sequence":
            assert reply.stop_sequence == stop, reply


def test_the_end_of_generation_inside_a_copied_run_ends_the_answer(
    url: str, client: anthropic.Anthropic
) -> None:
    """The answer copies the prompt's sentence, which the prompt follows
    with the end-of-turn token: a draft holding it is verified, and the
    answer ends there as it does without speculation."""
    p = params("spec", ECHO, max_tokens=64)
    got = client.messages.create(**p)
    plain = client.messages.create(**params("plain", ECHO, max_tokens=64))
    assert plain.stop_reason == "end_turn", plain
    check_same(client, got, plain, p, "end of generation")


def test_a_forced_tool_call_parses_with_drafts(client: anthropic.Anthropic) -> None:
    prompt = 'Call the tool with {"city": "Paris"} for the weather in Paris; {"city": "Paris"} is the input.'
    extra = {"tools": [WEATHER], "tool_choice": {"type": "any"}}
    got, plain = (
        client.messages.create(**params(m, prompt, max_tokens=64, **extra)) for m in ("spec", "plain")
    )
    for reply in (got, plain):
        assert reply.stop_reason == "tool_use", reply
        use = next(block for block in reply.content if block.type == "tool_use")
        assert use.name == "get_weather" and isinstance(use.input.get("city"), str), use
    use_got = next(b for b in got.content if b.type == "tool_use")
    use_plain = next(b for b in plain.content if b.type == "tool_use")
    assert use_got.input == use_plain.input
    assert got.usage.output_tokens == plain.usage.output_tokens
    assert got.usage.input_tokens + got.usage.cache_read_input_tokens == counted(
        client, params("spec", prompt, **extra)
    )


def test_the_status_reports_the_counters(url: str) -> None:
    models = httpx.get(f"{url}/v1/status", timeout=30).json()
    text = str(models)
    assert "spec_decode_draft_tokens" in text and "spec_decode_accepted_tokens" in text, models


def test_auto_times_a_verifying_step_and_says_what_it_chose() -> None:
    """``speculative = "auto"`` (the default): the load line gives the timed
    cost ratio, the expected speed-up and the choice, consistent with
    :func:`~missive_llamacpp.speculative.auto_decision`; and the server
    drafts exactly when it said so."""
    from missive_llamacpp.speculative import AUTO_MIN_SPEEDUP

    config = {"server": {"metrics_public": True}, "models": {"auto": entry()}}
    with serve_process(config) as server:
        line = re.search(
            r"speculative=auto: (ngram|off) \(a 9-token step costs ([\d.]+)x one token, ([\d.]+) ms: "
            r"drafting would give ~([\d.]+)x",
            server.log(),
        )
        assert line, server.log()[-3000:]
        chose, ratio, one_ms, expected = (
            line.group(1),
            float(line.group(2)),
            float(line.group(3)),
            float(line.group(4)),
        )
        assert ratio > 0 and one_ms > 0
        assert (chose == "ngram") == (expected >= AUTO_MIN_SPEEDUP)
        client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=DEADLINE)
        client.messages.create(**params("auto", ECHO, max_tokens=40))
        body = httpx.get(f"{server.url}/metrics", timeout=30).text
        match = re.search(
            r'^missive:spec_decode_num_draft_tokens_total\{model_name="auto"\} (\S+)$', body, re.M
        )
        assert match, body[-2000:]
        assert (float(match.group(1)) > 0) == (chose == "ngram"), (chose, match.group(1))
