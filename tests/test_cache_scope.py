"""Prompt-cache scopes on the embedded default model (SmolLM2-135M on
llama.cpp), through the official SDKs: a key never reads another key's
cached prompt, keys put in one ``cache_scope`` share, an open server shares.

The probe this answers: alice sends a unique prompt; bob sends the same one
and got ``cache_read_input_tokens`` (``cached_tokens`` on the OpenAI door)
for all but its last token, so bob could tell which text alice had sent.
Anthropic and OpenAI keep prompt caches apart between organizations
(Anthropic, "Prompt caching", cache isolation; OpenAI, "Prompt caching":
caches are not shared between organizations); a key is Missive's tenant
(docs/operations.md#prompt-cache-scopes).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from missive.testing import InProcessApp, in_process_app
from missive_llamacpp.plugin import default_model_path

MODEL = "smollm2-135m"
ALICE, BOB, CAROL, DAVE = "sk-alice-scope", "sk-bob-scope", "sk-carol-scope", "sk-dave-scope"
GREEDY = {"temperature": 0.0}


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def model(parallel: int) -> dict[str, Any]:
    return {
        MODEL: {
            "driver": "llamacpp",
            "context_window": 4096,
            "settings": {"model_path": str(default_model_path()), "parallel": parallel},
        }
    }


def secret(topic: str) -> str:
    """A system prompt of about 250 tokens no other test sends (nor another
    app of this module: the disk tier of the session's state directory
    keeps each app's states for the next)."""
    return f"Private notes about {topic} ({uuid.uuid4()}). " + " ".join(
        f"Item {i} of the {topic} file: keep it between us." for i in range(14)
    )


@pytest.fixture(scope="module", params=[1, 2], ids=["one-slot", "two-slots"])
def keyed(request: pytest.FixtureRequest) -> Iterator[InProcessApp]:
    """Plain keys alice and bob (a scope each); carol and dave in ``team-a``.
    One slot: bob's request takes alice's slot (her state goes to the host
    cache); two: alice's tokens stay in a slot beside bob's."""
    config = {
        "server": {"api_keys": [ALICE, BOB]},
        "keys": {
            "carol": {"key_sha256": sha256(CAROL), "cache_scope": "team-a"},
            "dave": {"key_sha256": sha256(DAVE), "cache_scope": "team-a"},
        },
        "models": model(request.param),
    }
    with in_process_app(config) as app:
        yield app


def ask(app: InProcessApp, key: str, system: str) -> anthropic.types.Usage:
    client = app.sdk(api_key=key, timeout=600)
    answer = client.messages.create(
        model=MODEL,
        max_tokens=1,
        system=system,
        messages=[{"role": "user", "content": "Summarise."}],
        extra_body=GREEDY,
    )
    return answer.usage


def test_another_key_reads_nothing_of_a_key_s_prompt(keyed: InProcessApp) -> None:
    system = secret("the Quaglione account")
    first = ask(keyed, ALICE, system)
    prompt = first.input_tokens + first.cache_read_input_tokens
    assert prompt > 150
    bob = ask(keyed, BOB, system)
    # No more than alice's first read of a text new to her (0 on a fresh
    # server; the template's opening when her scope holds earlier prompts).
    assert bob.cache_read_input_tokens <= first.cache_read_input_tokens, bob
    assert bob.input_tokens + bob.cache_read_input_tokens == prompt
    again = ask(keyed, ALICE, system)
    assert again.cache_read_input_tokens >= prompt - 1, again  # alice's own prefix is still hers
    bob_again = ask(keyed, BOB, system)
    assert bob_again.cache_read_input_tokens >= prompt - 1, bob_again  # and bob's his


def test_the_openai_door_reports_no_cached_tokens_of_another_key(keyed: InProcessApp) -> None:
    system = secret("the Ravensworth merger")
    messages = [{"role": "system", "content": system}, {"role": "user", "content": "Summarise."}]

    def chat(key: str) -> Any:
        client = openai.OpenAI(
            base_url=keyed.url + "/v1", api_key=key, http_client=keyed.http_client(), max_retries=0
        )
        done = client.chat.completions.create(
            model=MODEL,
            messages=messages,  # type: ignore[arg-type]
            max_tokens=1,
            temperature=0.0,
        )
        return done.usage

    alice = chat(ALICE)
    bob = chat(BOB)
    assert alice.prompt_tokens > 150 and bob.prompt_tokens == alice.prompt_tokens
    # alice's first read is what a text new to a scope gives (the template's opening)
    assert bob.prompt_tokens_details.cached_tokens <= alice.prompt_tokens_details.cached_tokens, bob
    assert bob.prompt_tokens_details.cached_tokens < 20
    assert chat(ALICE).prompt_tokens_details.cached_tokens >= alice.prompt_tokens - 1


def test_keys_of_one_cache_scope_share(keyed: InProcessApp) -> None:
    system = secret("team A's roadmap")
    carol = ask(keyed, CAROL, system)
    prompt = carol.input_tokens + carol.cache_read_input_tokens
    dave = ask(keyed, DAVE, system)
    assert dave.cache_read_input_tokens >= prompt - 1, dave  # team-a's
    # Not alice's: she reads at most the template's opening her own earlier prompts left.
    assert ask(keyed, ALICE, system).cache_read_input_tokens < 20


def test_an_open_server_has_one_scope() -> None:
    """No key configured: everyone is one tenant, and the cache serves every request."""
    with in_process_app({"models": model(1)}) as app:
        system = secret("the open lab")
        first = ask(app, "anyone", system)
        prompt = first.input_tokens + first.cache_read_input_tokens
        assert ask(app, "someone-else", system).cache_read_input_tokens >= prompt - 1
