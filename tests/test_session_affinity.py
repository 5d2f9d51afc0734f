"""Session affinity in the engine's slot and host-cache choice (:mod:`missive.messages.session`).

Units on :meth:`missive.engine.batcher.Batcher.choose_slot` and
:meth:`missive.engine.host_cache.HostPromptCache.best`, with what each slot
or saved state would reuse given directly, and the session id read from a
request (Claude Code's header, its ``metadata.user_id`` forms).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from missive.engine.batcher import Batcher
from missive.engine.host_cache import HostPromptCache
from missive.engine.runner import Batched, SavedContext
from missive.messages.session import session_of
from missive.protocol.schema.request import MessagesRequest

SYSTEM = list(range(100))  # a system prompt two conversations share


class _Runner(Batched):  # type: ignore[misc]
    """Only what the batcher's constructor looks at (a batched runner)."""

    def step_many(self, seqs: Any) -> Any:  # pragma: no cover - never stepped here
        raise NotImplementedError


def batcher(reuse: dict[int, int], elsewhere: int, owners: list[str | None]) -> Batcher:
    b = Batcher(
        _Runner(),
        ThreadPoolExecutor(1),
        len(owners),
        reuse=lambda prompt, slot: reuse[slot],
        elsewhere=lambda prompt: elsewhere,
    )
    b._session = list(owners)
    return b


def test_ties_go_to_the_own_session_then_to_no_other_session() -> None:
    tied = {0: 100, 1: 100, 2: 100}
    assert batcher(tied, 0, ["main", "sub", None]).choose_slot(SYSTEM, "sub") == 1
    assert batcher(tied, 0, ["main", "other", None]).choose_slot(SYSTEM, "sub") == 2
    assert batcher(tied, 0, ["main", "other", None]).choose_slot(SYSTEM, None) == 2
    # A longer prefix still wins whoever's it is: affinity only breaks ties.
    assert batcher({0: 300, 1: 100, 2: 0}, 0, ["main", "sub", None]).choose_slot(SYSTEM, "sub") == 0


def test_a_subagent_does_not_take_the_main_conversation_s_slot() -> None:
    """The subagent's prompt shares only the system prompt with the main
    conversation's slot, and its own saved state serves as much: it is
    restored into the free slot, and the main conversation keeps its own."""
    b = batcher({0: 100, 1: 0}, 100, ["main", None])
    assert b.choose_slot(SYSTEM, "sub") == 1
    # Without a session the old rule holds: the slot serving most is taken.
    assert batcher({0: 100, 1: 0}, 100, ["main", None]).choose_slot(SYSTEM, None) == 0


def test_host_cache_prefers_the_own_session_among_equal_entries() -> None:
    cache = HostPromptCache(max_bytes=10_000)
    main = SavedContext(tokens=SYSTEM + [1, 2, 3], state="main", nbytes=10)
    sub = SavedContext(tokens=SYSTEM + [7, 8, 9], state="sub", nbytes=10)
    assert cache.put(main, "main") and cache.put(sub, "sub")
    prompt = SYSTEM + [5]
    assert cache.best(prompt, "main")[0] is main
    assert cache.best(prompt, "sub")[0] is sub
    assert cache.best(SYSTEM + [7, 8], "main") == (sub, 102)  # longest prefix first


def test_session_id_from_the_header_or_metadata() -> None:
    def req(user_id: str | None) -> MessagesRequest:
        body: dict[str, Any] = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}
        if user_id is not None:
            body["metadata"] = {"user_id": user_id}
        return MessagesRequest.model_validate(body)

    modern = '{"device_id":"d1","account_uuid":"","session_id":"7fcde19a-f550-405c-adaf-d502f3483011"}'
    legacy = "user_abc_account__session_0c9f6a1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
    assert session_of(req(modern), {}) == "7fcde19a-f550-405c-adaf-d502f3483011"
    assert session_of(req(legacy), None) == "0c9f6a1e-2b3d-4e5f-8a9b-0c1d2e3f4a5b"
    assert session_of(req(modern), {"x-claude-code-session-id": "from-header"}) == "from-header"
    assert session_of(req("alice"), {}) is None and session_of(req(None), {}) is None
    assert session_of(req("{not json"), {}) is None
