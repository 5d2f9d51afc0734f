"""Replica policies (:mod:`missive.routing.policy`) and the prefix index
(:mod:`missive.routing.prefix`): which replica a request is sent to, with the
replicas' loads and the prefixes they were sent given directly. The same
policies against real HTTP replicas: tests/test_routing_fleet.py; against two
real llama-servers: plugins/llamaserver/tests/test_llamaserver_fleet.py."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from missive.remote.replicas import ReplicaPool
from missive.routing.policy import LeastOutstanding, PrefixAffinity, ReplicaRouting, policy_for
from missive.routing.prefix import BLOCK_CHARS, PrefixIndex, RouteKey


@dataclass(eq=False)
class Fake:
    url: str
    outstanding: int = 0


def fleet(n: int) -> list[Fake]:
    return [Fake(f"http://gpu{i}:8000") for i in range(n)]


SYSTEM = {"role": "system", "content": "You are a coding agent. " * 40}
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]


def chat(*turns: str, session: str | None = None) -> RouteKey:
    messages: list[dict[str, Any]] = [SYSTEM]
    for i, text in enumerate(turns):
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return RouteKey.of_chat({"messages": messages, "tools": TOOLS}, session)


LONG = "Read the file and explain what every function does, line by line. " * 20


def test_chat_keys_share_the_blocks_of_a_shared_prefix() -> None:
    first = chat(LONG)
    second = chat(LONG, "It defines three functions.", "Now the second file, please.")
    other = chat("Something else entirely. " * 60)
    assert len(first.blocks) >= 6
    assert (
        second.blocks[: len(first.blocks) - 1] == first.blocks[:-1]
    )  # the last block of a turn may be partial
    shared = next(i for i, (a, b) in enumerate(zip(first.blocks, other.blocks, strict=False)) if a != b)
    assert 0 < shared < len(first.blocks) - 2  # the system prompt and tools only
    assert RouteKey.of_text("x" * (BLOCK_CHARS - 1)).blocks == ()  # only whole blocks count


def test_index_finds_the_deepest_block_and_evicts_leaves_first() -> None:
    index = PrefixIndex(capacity=10)
    owner = object()
    long = RouteKey.of_tokens(list(range(16 * 8))).blocks  # 8 blocks
    index.insert(owner, long)
    assert index.depth(owner, long) == 8
    assert index.depth(owner, long[:5]) == 5
    assert index.depth(owner, RouteKey.of_tokens(list(range(16 * 3)) + [999] * 16).blocks) == 3
    # Another prompt sharing 2 blocks: 6 new blocks push out the first
    # prompt's 4 deepest, never its leading ones.
    branch = RouteKey.of_tokens(list(range(32)) + list(range(500, 596))).blocks
    index.insert(owner, branch)
    assert index.size(owner) == 10
    assert index.depth(owner, branch) == 8 and index.depth(owner, long) == 4
    index.forget(owner)
    assert index.depth(owner, long) == 0 and index.recency(owner) == 0


def test_a_conversation_returns_to_the_replica_holding_its_prefix() -> None:
    replicas, policy = fleet(4), PrefixAffinity()
    first, why = policy.choose(replicas, chat(LONG, session="s1"))
    assert why == "session"  # nothing held yet: the session's rendezvous replica
    # Other conversations arrive in between (and end).
    for i in range(6):
        policy.choose(replicas, chat(f"Unrelated task number {i}. " * 30, session=f"other{i}"))
    again, why = policy.choose(replicas, chat(LONG, "Sure.", "And the tests?", session="s1"))
    assert (again, why) == (first, "prefix")
    # Without a session id the prefix alone finds it.
    assert policy.choose(replicas, chat(LONG, "Sure.", "And the docs?"))[0] is first


def test_equal_prefixes_go_to_the_session_s_replica_then_the_least_loaded() -> None:
    replicas, policy = fleet(3), PrefixAffinity()
    for i, replica in enumerate(replicas):  # the system prompt and tools are held everywhere
        policy.index.insert(replica, chat(f"task {i} " * 40).blocks)
    policy._served(replicas[2], RouteKey(session="sub"))
    assert policy.choose(replicas, chat("A subagent's own task. " * 20, session="sub")) == (
        replicas[2],
        "prefix",
    )
    replicas[0].outstanding = 1
    replicas[1].outstanding = 0
    replicas[2].outstanding = 1
    assert policy.choose(replicas, chat("A new session's task. " * 20, session="new"))[0] is replicas[1]


def test_bounded_load_skips_an_affine_replica_over_the_mean() -> None:
    replicas, policy = fleet(4), PrefixAffinity(load_bound=1.25)
    key = chat(LONG, session="busy")
    home, _ = policy.choose(replicas, key)
    home.outstanding = 2  # in flight: 2 of 2, this one makes 3; max(ceil(1.25 * 3/4), floor(3/4 + 2)) = 2
    elsewhere, why = policy.choose(replicas, chat(LONG, "ok", "next", session="busy"))
    assert elsewhere is not home and why == "session"  # no other holds any of it: the next rendezvous pick
    for other in replicas:
        other.outstanding = 2  # now 8 in flight + 1: max(ceil(1.25 * 9/4), floor(9/4 + 2)) = 4
    # The conversation now goes on where its latest turn went (the deepest prefix).
    assert policy.choose(replicas, chat(LONG, "ok", "next", "sure", session="busy")) == (elsewhere, "prefix")
    fresh = PrefixAffinity(load_bound=1.25)
    home, _ = fresh.choose(replicas, key)
    assert fresh.choose(replicas, chat(LONG, "ok", session="busy")) == (home, "prefix")
    # With load_bound 1 and no slack balance comes first.
    strict = PrefixAffinity(load_bound=1.0, load_slack=0)
    for r in replicas:
        r.outstanding = 0
    home, _ = strict.choose(replicas, key)
    home.outstanding = 1
    assert strict.choose(replicas, chat(LONG, "ok", session="busy"))[0] is not home


def test_one_request_of_noise_keeps_the_affine_replica_and_real_excess_does_not() -> None:
    """The cap is ``max(ceil(load_bound * mean), floor(mean + load_slack))``
    with the request placed counted in: at 3 in flight per replica the
    relative cap alone (4) would move a turn whose replica holds a fourth
    request; the slack keeps it there until the fifth (3 + 1 + 2 = 6 > 5)."""
    replicas = fleet(16)
    for policy, keeps_at_4, keeps_at_5 in (
        (PrefixAffinity(load_bound=1.25, load_slack=0), False, False),
        (PrefixAffinity(load_bound=1.25), True, False),
    ):
        home, _ = policy.choose(replicas, chat(LONG, session="s"))
        for r in replicas:
            r.outstanding = 3
        for load, keeps in ((4, keeps_at_4), (5, keeps_at_5)):
            home.outstanding = load  # the relative cap stays ceil(1.25 * 3.1...) = 4
            chosen, _ = policy.choose(replicas, chat(LONG, "ok", f"turn at {load}", session="s"))
            assert (chosen is home) is keeps, (policy.load_slack, load)
            if chosen is not home:  # the conversation went on there: bring the next turn home again
                policy.forget(chosen)
        for r in replicas:
            r.outstanding = 0
    with pytest.raises(ValueError):
        PrefixAffinity(load_slack=-1)


def test_a_new_conversation_goes_where_the_load_was_lowest_not_where_it_is_now() -> None:
    """A replica whose conversations are all between turns has nothing in
    flight now; the smoothed load (averaged over the routing decisions) still
    shows them, so a new conversation goes to the replica that was idle."""
    replicas, policy = fleet(2), PrefixAffinity()
    for i in range(3):  # the shared system prompt and tools are held by both
        policy.index.insert(replicas[i % 2], chat(f"task {i} " * 40).blocks)
    busy, idle = replicas
    busy.outstanding = 6
    for i in range(200):  # requests without affinity, sent while busy was busy (they go to idle)
        policy.choose(replicas, RouteKey(session=f"side{i}"))
    busy.outstanding = 0  # its conversations are between turns
    idle.outstanding = 1
    assert policy.smoothed_load(busy) > 2 > policy.smoothed_load(idle)
    chosen, why = policy.choose(replicas, chat("A new session's task. " * 20, session="new"))
    assert (chosen, why) == (idle, "prefix")  # least outstanding now would pick busy
    policy.forget(busy)
    assert policy.smoothed_load(busy) == 0


def test_a_new_session_lands_on_the_same_replica_from_any_process() -> None:
    """The rendezvous hash depends on the session and the URLs only: two
    policies (two workers, two Missive instances) agree without sharing state."""
    a, b = PrefixAffinity(), PrefixAffinity()
    picks = {f"session-{i}": a.choose(fleet(4), RouteKey(session=f"session-{i}"))[0].url for i in range(40)}
    assert picks == {s: b.choose(fleet(4), RouteKey(session=s))[0].url for s in picks}
    assert len(set(picks.values())) == 4  # and sessions spread over the fleet
    # Removing a replica moves only its own sessions.
    three = fleet(4)[:3]
    moved = {s for s in picks if PrefixAffinity().choose(three, RouteKey(session=s))[0].url != picks[s]}
    assert moved == {s for s, url in picks.items() if url == "http://gpu3:8000"}


def test_a_replica_that_went_down_loses_its_prefixes_and_sessions() -> None:
    replicas, policy = fleet(2), PrefixAffinity()
    home, _ = policy.choose(replicas, chat(LONG, session="s"))
    policy.forget(home)
    assert policy.session_replica("s") is None and policy.index.size(home) == 0
    other = [r for r in replicas if r is not home]
    assert policy.choose(other, chat(LONG, "ok", "next", session="s"))[0] is other[0]


def test_requests_without_a_key_and_the_default_policy_take_the_least_loaded() -> None:
    replicas = fleet(3)
    replicas[0].outstanding, replicas[1].outstanding = 2, 0
    replicas[2].outstanding = 1
    assert PrefixAffinity().choose(replicas, None) == (replicas[1], "least_outstanding")
    assert LeastOutstanding().choose(replicas, chat(LONG, session="s")) == (replicas[1], "least_outstanding")
    assert isinstance(policy_for(ReplicaRouting()), LeastOutstanding)
    body = {"messages": [SYSTEM, {"role": "user", "content": LONG}], "tools": TOOLS}
    assert LeastOutstanding().key(body, "s") == RouteKey(session="s")  # no blocks: nothing would read them
    assert PrefixAffinity().key(body, "s") == RouteKey.of_chat(body, "s") and RouteKey.of_chat(body).blocks
    prefix = policy_for(ReplicaRouting(replica_policy="prefix", prefix_cache_tokens=64_000, load_bound=1.5))
    assert isinstance(prefix, PrefixAffinity) and prefix.load_bound == 1.5
    assert prefix.index.capacity == 64_000 * 4 // BLOCK_CHARS
    with pytest.raises(ValueError):
        ReplicaRouting(load_bound=0.9)


@pytest.mark.anyio
async def test_the_pool_counts_why_and_forgets_a_failed_replica() -> None:
    async with httpx.AsyncClient() as client:
        pool = ReplicaPool(["http://a:1", "http://b:1"], client=client, policy=PrefixAffinity())
        key = chat(LONG, session="s")
        home = pool.take(route=key)
        pool.release(home)
        assert pool.take(route=chat(LONG, "ok", "next", session="s")) is home
        pool.release(home)
        assert home.routed == {"session": 1, "prefix": 1}
        pool.mark_failed(home, "test")
        other = pool.take(route=chat(LONG, "ok", "next", session="s"))
        assert other is not home and isinstance(pool.policy, PrefixAffinity)
        assert pool.policy.index.size(home) == 0
        pool.release(other)
        await pool.aclose()
