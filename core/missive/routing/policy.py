"""Replica policies: which healthy replica of a remote backend takes a request.

Two policies, chosen per model by its ``replica_policy`` setting
(:class:`ReplicaRouting`, part of every remote driver's settings):

``least_outstanding`` (the default, :class:`LeastOutstanding`)
    the replica with the fewest requests in flight, ties round-robin.

``prefix`` (:class:`PrefixAffinity`)
    for a request with a :class:`~missive.routing.prefix.RouteKey`, in order:

    1. **bounded load**: an affine replica is skipped when it is over the
       mean load both relatively and absolutely. With ``m`` requests in
       flight (this one included) over ``n`` replicas, a replica may hold at
       most ``max(ceil(load_bound * m / n), floor(m / n + load_slack))``;
       the least loaded always may, so some replica is always left. The
       relative cap is consistent hashing with bounded loads (Mirrokni,
       Thorup, Zadimoghaddam, "Consistent Hashing with Bounded Loads", SODA
       2018: capacity ``ceil((1 + ε) m / n)``). The absolute slack is the
       second condition of SGLang's cache-aware router, which leaves cache
       affinity only when the loads differ by more than
       ``balance_abs_threshold`` requests *and* by more than the factor
       ``balance_rel_threshold`` (``sgl-router`` ``policies/cache_aware.rs``).
       In-flight counts are small integers (about 3 per replica in the
       simulator, ``benchmarks/sim_routing.py``), so the relative cap alone
       trips on one request of noise: at a mean of 3, ``ceil(1.25 * 3)`` is
       4, and every turn sent while its replica held a fourth request moved
       to another replica and read its whole prompt again there;
    2. **prefix**: the replica holding the longest prefix of the request's
       blocks (:class:`~missive.routing.prefix.PrefixIndex`); among replicas
       holding equally much, the session's replica, then the least
       **smoothed load** (below), then the fewest in flight;
    3. **session**: no prefix held anywhere, the replica the request's
       session last used; a session seen for the first time goes to the
       less loaded (smoothed) of its two highest rendezvous hashes (Thaler
       and Ravishankar's HRW hashing over the replica URLs, stable across
       processes), so every Missive worker and every Missive instance in
       front of the same fleet sends a new session to the same pair of
       replicas without sharing any state;
    4. otherwise, least outstanding.

    **Smoothed load** places what has no affinity yet (a new conversation,
    which shares only the prefix every session has, and so is tied
    everywhere). A replica's requests in flight right now say little about
    the load it will carry: its conversations come and go between turns
    (tool runs, a user typing), so the instant count is mostly noise and a
    replica whose many conversations all happen to be between turns looks
    idle. The policy keeps, per replica, an exponential moving average of its
    in-flight count sampled at every routing decision (over about
    :data:`LOAD_SMOOTHING` decisions per replica; arrivals see the time
    average of a queue's state: Wolff, "Poisson Arrivals See Time Averages",
    Operations Research 30(2), 1982), and ranks tied replicas by that average
    plus their count now. New conversations then land where the load of the
    conversations already placed is lowest, and fewer later turns need the
    bound to move them (each move costs a full prefill).

    The chosen replica is then noted as holding the request's blocks and as
    the session's replica. A replica taken out of rotation loses its entries
    (:meth:`PrefixAffinity.forget`): the next turn of its conversations goes
    elsewhere by the same rules.

Requests without a key (``/tokenize``, ``/props``, health probes) always go
to the least outstanding replica: they do not touch a prefix cache.

Each choice says why it was made (``prefix``, ``session`` or
``least_outstanding``), counted per replica for ``/metrics``
(``missive:replica_routed_total``).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, Field

from .prefix import BLOCK_CHARS, CHARS_PER_TOKEN, PrefixIndex, RouteKey

__all__ = [
    "ReplicaRouting",
    "ReplicaPolicy",
    "LeastOutstanding",
    "PrefixAffinity",
    "policy_for",
    "Loaded",
    "REASONS",
]

#: Why a replica was chosen, as counted in ``/metrics``.
REASONS = ("prefix", "session", "least_outstanding")
#: Sessions whose replica is remembered (least recently used forgotten first).
MAX_SESSIONS = 65536
#: Routing decisions per replica that the smoothed load averages over
#: (about a minute of requests at 16 replicas in the simulator, where 2, 8
#: and 64 kept fewer cache hits or less balance on its first seed).
LOAD_SMOOTHING = 32


class Loaded(Protocol):
    """What a policy reads of a replica (:class:`missive.remote.replicas.Replica`)."""

    @property
    def url(self) -> str: ...

    @property
    def outstanding(self) -> int: ...


R = TypeVar("R", bound=Loaded)


class ReplicaRouting(BaseModel):
    """The replica settings every remote driver takes, in ``[models.<id>.settings]``.

    Attributes:
        replica_policy: ``least_outstanding`` or ``prefix`` (see the module doc).
        load_bound: ``prefix`` only: ``1 + ε``, how far above the mean load an
            affine replica may be and still be chosen (at least 1; larger
            trades balance for cache hits).
        load_slack: ``prefix`` only: how many requests above the mean load
            an affine replica may also be (0 to 1000; with ``load_bound`` 1
            and ``load_slack`` 0, strict balance).
        prefix_cache_tokens: ``prefix`` only: about how many prompt tokens one
            replica's prefix cache holds (vLLM prints its ``GPU KV cache
            size``; a llama-server holds ``--ctx-size`` plus ``--cache-ram``);
            the index remembers about this much per replica.
    """

    replica_policy: Literal["least_outstanding", "prefix"] = "least_outstanding"
    load_bound: float = Field(default=1.25, ge=1.0, le=100.0)
    load_slack: float = Field(default=2.0, ge=0.0, le=1000.0)
    prefix_cache_tokens: int = Field(default=1_000_000, ge=1_000)


class LeastOutstanding:
    """The fewest requests in flight, ties round-robin (so an idle fleet is used evenly)."""

    name = "least_outstanding"

    def __init__(self) -> None:
        self._turn = itertools.count()

    def least(self, candidates: Sequence[R]) -> R:
        """The least outstanding of ``candidates`` (not empty), ties in turn."""
        start = next(self._turn) % len(candidates)
        rotated = [*candidates[start:], *candidates[:start]]
        return min(rotated, key=lambda r: r.outstanding)

    def key(self, body: Mapping[str, Any], session: str | None) -> RouteKey:
        """What this policy routes a chat ``body`` by: here the session
        alone (the prompt's blocks cost CPU that nothing here would use)."""
        return RouteKey(session=session)

    def choose(self, candidates: Sequence[R], route: RouteKey | None = None) -> tuple[R, str]:
        """The replica for a request (``candidates``: healthy, not yet tried,
        not empty), and why (one of :data:`REASONS`)."""
        return self.least(candidates), "least_outstanding"

    def forget(self, replica: Loaded) -> None:
        """``replica`` went out of rotation (nothing to forget here)."""


def _rendezvous(session: str, url: str) -> bytes:
    return hashlib.blake2b(f"{session}\0{url}".encode(), digest_size=8).digest()


class PrefixAffinity(LeastOutstanding):
    """The ``prefix`` policy (see the module doc).

    Args:
        load_bound: ``1 + ε`` (at least 1).
        capacity_blocks: blocks remembered per replica.
        max_sessions: sessions whose replica is remembered.
        load_slack: requests above the mean an affine replica may also hold
            (at least 0).
    """

    name = "prefix"

    def __init__(
        self,
        load_bound: float = 1.25,
        capacity_blocks: int = 16384,
        max_sessions: int = MAX_SESSIONS,
        load_slack: float = 2.0,
    ) -> None:
        super().__init__()
        if load_bound < 1:
            raise ValueError("load_bound must be at least 1")
        if load_slack < 0:
            raise ValueError("load_slack must be at least 0")
        self.load_bound = load_bound
        self.load_slack = load_slack
        self._smoothed: dict[Loaded, float] = {}
        self.index = PrefixIndex(capacity_blocks)
        self._sessions: OrderedDict[str, Loaded] = OrderedDict()
        self._max_sessions = max_sessions

    def key(self, body: Mapping[str, Any], session: str | None) -> RouteKey:
        """The chat ``body``'s blocks and ``session`` (:meth:`RouteKey.of_chat`)."""
        return RouteKey.of_chat(body, session)

    def under_bound(self, candidates: Sequence[R]) -> list[R]:
        """The candidates that may take one more request (never empty)."""
        mean = (sum(r.outstanding for r in candidates) + 1) / len(candidates)
        # A hair off the products, so 1.25 * 4 / 4 is 5/4 and not 1.2500000001.
        cap = max(math.ceil(self.load_bound * mean - 1e-9), math.floor(mean + self.load_slack + 1e-9))
        return [r for r in candidates if r.outstanding + 1 <= cap]

    def smoothed_load(self, replica: Loaded) -> float:
        """``replica``'s in-flight count averaged over recent routing
        decisions (its count now before it was ever sampled)."""
        return self._smoothed.get(replica, float(replica.outstanding))

    def _sample(self, candidates: Sequence[Loaded]) -> None:
        weight = 1 / (LOAD_SMOOTHING * len(candidates))
        for r in candidates:
            average = self.smoothed_load(r)
            self._smoothed[r] = average + weight * (r.outstanding - average)

    def _least_smoothed(self, candidates: Sequence[R]) -> R:
        return min(candidates, key=lambda r: (self.smoothed_load(r) + r.outstanding, r.outstanding))

    def session_replica(self, session: str | None) -> Loaded | None:
        """The replica ``session`` last used, if remembered."""
        return self._sessions.get(session) if session is not None else None

    def choose(self, candidates: Sequence[R], route: RouteKey | None = None) -> tuple[R, str]:
        if route is None:
            return self.least(candidates), "least_outstanding"
        self._sample(candidates)
        allowed = self.under_bound(candidates)
        mine = self.session_replica(route.session)
        chosen: R | None = None
        reason = "least_outstanding"
        if route.blocks:
            depths = {id(r): self.index.depth(r, route.blocks) for r in allowed}
            deepest = max(depths.values())
            if deepest > 0:
                tied = [r for r in allowed if depths[id(r)] == deepest]
                sessions = [r for r in tied if r is mine]
                chosen = sessions[0] if sessions else self._least_smoothed(tied)
                reason = "prefix"
        if chosen is None and route.session is not None:
            remembered = [r for r in allowed if r is mine]
            if remembered:
                chosen = remembered[0]
            else:
                ranked = sorted(allowed, key=lambda r: _rendezvous(route.session or "", r.url), reverse=True)
                chosen = self._least_smoothed(ranked[:2])
            reason = "session"
        if chosen is None:
            chosen = self.least(allowed)
        self._served(chosen, route)
        return chosen, reason

    def _served(self, replica: Loaded, route: RouteKey) -> None:
        if route.blocks:
            self.index.insert(replica, route.blocks)
        if route.session is not None:
            self._sessions[route.session] = replica
            self._sessions.move_to_end(route.session)
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)

    def forget(self, replica: Loaded) -> None:
        """Drop ``replica``'s prefixes, the sessions pointing at it and its
        smoothed load (back in rotation, it starts from its count then)."""
        self.index.forget(replica)
        self._smoothed.pop(replica, None)
        for session in [s for s, r in self._sessions.items() if r is replica]:
            del self._sessions[session]


ReplicaPolicy = LeastOutstanding


def policy_for(settings: ReplicaRouting) -> LeastOutstanding:
    """The policy a model's settings ask for."""
    if settings.replica_policy == "prefix":
        blocks = max(1, settings.prefix_cache_tokens * CHARS_PER_TOKEN // BLOCK_CHARS)
        return PrefixAffinity(settings.load_bound, blocks, load_slack=settings.load_slack)
    return LeastOutstanding()
