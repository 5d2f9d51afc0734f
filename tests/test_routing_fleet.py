"""The ``prefix`` replica policy through the app in process and real HTTP: the
``openai`` driver in front of three fake vLLM-style replicas
(:class:`missive_openai.testing.FakeChatServer`, which records every body it
is sent), Claude Code-shaped sessions interleaved through the SDK. Each
conversation's turns all reach one replica with ``prefix``; with
``least_outstanding`` they spread; a replica that stops answering loses its
conversations to the others, which answer them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import anthropic
import pytest

from missive.testing import InProcessApp, in_process_app
from missive_openai.testing import FakeChatServer

TOPICS = ("the build scripts", "the database schema", "the release notes")


@pytest.fixture(scope="module")
def fakes() -> Iterator[list[FakeChatServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(FakeChatServer(vllm=False)) for _ in range(3)]


@pytest.fixture(scope="module")
def app(fakes: list[FakeChatServer]) -> Iterator[InProcessApp]:
    """The app in process (api tier): each answer is a request and its response, nothing needs a socket."""
    urls = [fake.url for fake in fakes]
    config = {
        "models": {
            "prefix": {
                "driver": "openai",
                "settings": {"base_urls": urls, "replica_policy": "prefix", "model": "fake-model"},
            },
            "spread": {"driver": "openai", "settings": {"base_urls": urls, "model": "fake-model"}},
        }
    }
    with in_process_app(config) as started:
        yield started


def converse(app: InProcessApp, model: str, tag: str, turns: int = 4, sessions: int = 3) -> None:
    """``sessions`` sessions, one conversation each, interleaved turn by turn."""
    talks: list[tuple[anthropic.Anthropic, str, list[dict[str, Any]]]] = [
        (
            app.sdk(api_key="test", default_headers={"x-claude-code-session-id": f"{tag}-{i}"}),
            f"[{tag} {i}] You help with {topic}. " + "Keep answers short and precise. " * 30,
            [],
        )
        for i, topic in enumerate(TOPICS[:sessions])
    ]
    for turn in range(turns):
        for client, system, messages in talks:
            messages.append({"role": "user", "content": f"question {turn} about it"})
            answer = client.messages.create(model=model, max_tokens=20, system=system, messages=messages)
            assert answer.content and answer.content[0].type == "text"
            messages.append({"role": "assistant", "content": answer.content[0].text})


def replicas_of(fakes: list[FakeChatServer], tag: str) -> dict[str, set[int]]:
    """For each conversation of ``tag`` (by its system prompt), the replicas its turns reached."""
    seen: dict[str, set[int]] = {}
    for index, fake in enumerate(fakes):
        for body in fake.requests:
            system = body["messages"][0]["content"]
            if system.startswith(f"[{tag} "):
                seen.setdefault(system[: len(tag) + 4], set()).add(index)
    return seen


def test_each_conversation_stays_on_one_replica(app: InProcessApp, fakes: list[FakeChatServer]) -> None:
    converse(app, "prefix", "prefix")
    seen = replicas_of(fakes, "prefix")
    assert len(seen) == 3 and all(len(where) == 1 for where in seen.values()), seen


def test_least_outstanding_spreads_a_conversation(app: InProcessApp, fakes: list[FakeChatServer]) -> None:
    converse(app, "spread", "spread", sessions=2)  # two over three replicas: each turn of one moves
    seen = replicas_of(fakes, "spread")
    assert len(seen) == 2 and all(len(where) >= 2 for where in seen.values()), seen


def test_a_failed_replica_s_conversations_go_on_elsewhere(
    app: InProcessApp, fakes: list[FakeChatServer]
) -> None:
    converse(app, "prefix", "before", turns=2)
    homes = replicas_of(fakes, "before")
    failing = next(iter(homes.values())).copy().pop()
    fakes[failing].fail_status = 503  # a 5xx before the answer: out of rotation, the next replica
    fakes[failing].health_status = 503
    try:
        converse(app, "prefix", "before", turns=2)  # the same sessions and prompts, from the start
    finally:
        fakes[failing].fail_status = None
        fakes[failing].health_status = 200
    after = replicas_of(fakes, "before")
    moved = [name for name, where in homes.items() if failing in where]
    assert moved and all(len(after[name] - {failing}) == 1 for name in moved), after
    assert all(after[name] == where for name, where in homes.items() if name not in moved), after
