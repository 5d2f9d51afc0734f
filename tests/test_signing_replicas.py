"""Replicas behind one load balancer share the thinking-signing key
(docs/deployment.md): a thinking block one ``missive serve`` returned is
replayed, in the next turn of the conversation, to another one.

Replica A is a real ``missive serve``, the others the app in this process
(another server, another process: nothing but the key is shared), all on
the echo driver; the echo model's
``{"echo_thinking": true}`` step answers with the thinking it received back
(verified, hence in the prompt), or ``(no replayed thinking)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.testing import in_process_app, serve_process
from missive_echo import script

KEY = "replicas-share-this-key-0123456789"
REASONING = "The user wants a haiku; five, seven, five."
THINKING = {"type": "enabled", "budget_tokens": 1024}


def config(thinking: dict[str, str]) -> dict[str, Any]:
    return {
        "thinking": thinking,
        "models": {
            "echo": {
                "driver": "echo",
                "context_window": 1000,
                "settings": {"capabilities": {"thinking": True}},
            },
        },
    }


def client(url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def replica_a() -> Iterator[str]:
    with serve_process(config({"signing_key": KEY})) as server:
        yield server.url


def first_turn(url: str, display: str | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The first user turn and the thinking block a server answered it with."""
    steps = ({"thinking": REASONING}, {"text": "Waves fold into foam."})
    messages = [{"role": "user", "content": script(*steps)}]
    thinking = {**THINKING, "display": display} if display else THINKING
    msg = client(url).messages.create(model="echo", max_tokens=2000, thinking=thinking, messages=messages)
    block = msg.content[0].model_dump()
    assert block["type"] == "thinking" and block["signature"]
    assert block["thinking"] == ("" if display == "omitted" else REASONING)
    return messages, {"role": "assistant", "content": [block, msg.content[1].model_dump()]}


def replay(
    thinking: dict[str, str], messages: list[dict[str, Any]], assistant: dict[str, Any]
) -> tuple[str, str | None]:
    """The next turn sent to another replica, configured with ``thinking``:
    the text of its answer (the thinking it got back) and its
    ``missive-dropped-thinking`` header."""
    follow = [*messages, assistant, {"role": "user", "content": script({"echo_thinking": True})}]
    with in_process_app(config(thinking)) as replica:
        raw = replica.sdk(timeout=60).messages.with_raw_response.create(
            model="echo", max_tokens=2000, thinking=THINKING, messages=follow
        )
    return raw.parse().content[-1].text, raw.headers.get("missive-dropped-thinking")


@pytest.mark.parametrize("display", [None, "omitted"])
def test_a_block_from_one_replica_is_accepted_by_another_with_the_same_key(
    replica_a: str, display: str | None
) -> None:
    """Replica B, configured with the same ``thinking.signing_key``, verifies
    A's signature and gives the reasoning back to the model; with
    ``display: "omitted"`` (Claude Code) the text reaches B only through A's
    sealed signature."""
    messages, assistant = first_turn(replica_a, display)
    text, dropped = replay({"signing_key": KEY}, messages, assistant)
    assert text == f"replayed thinking: {REASONING}"
    assert dropped is None


def test_a_shared_key_file_works_like_a_shared_key(replica_a: str, tmp_path: Path) -> None:
    """A replica whose ``thinking.key_file`` holds the same bytes (a file on
    shared storage, a mounted Kubernetes Secret) accepts A's blocks too."""
    key_file = tmp_path / "secret" / "thinking.key"
    key_file.parent.mkdir()
    key_file.write_bytes(KEY.encode())
    key_file.chmod(0o400)  # read-only, like a mounted Secret
    messages, assistant = first_turn(replica_a, "omitted")
    text, dropped = replay({"key_file": str(key_file)}, messages, assistant)
    assert text == f"replayed thinking: {REASONING}"
    assert dropped is None


def test_a_replica_with_another_key_accepts_the_block_but_leaves_it_out(replica_a: str) -> None:
    """With a different key the block is handled as any foreign thinking
    block (docs/thinking.md): the request is accepted, the reasoning is left
    out of the prompt, and the response says so in ``missive-dropped-thinking``."""
    messages, assistant = first_turn(replica_a, None)
    text, dropped = replay({"signing_key": "another-replicas-key-9876543210"}, messages, assistant)
    assert text == "replayed thinking: (no replayed thinking)"
    assert dropped == "messages.1.content.0 (signature not from this server, or the block was changed)"
