"""Replica policies replayed on a simulated fleet (issue 33): no sockets, no model.

N replicas, each with an LRU prefix cache of ``--cache-tokens`` tokens, serve a
trace of Claude Code-like sessions; each request is routed by the policy
Missive runs (:mod:`missive.routing.policy`, the same classes the remote
drivers use, fed :class:`~missive.routing.prefix.RouteKey` token keys), and
the simulator counts, per policy and fleet size:

* **cache hit / ideal**: prompt tokens served from the chosen replica's
  cache, over what one infinite cache shared by the whole fleet would have
  served (the most any routing can reach); also over the tokens past the
  prefix every session shares (the part only affinity can save);
* **later turns on their last replica**: how often a conversation's next
  turn goes where its previous one went;
* **queue depth**: requests in flight on a replica, sampled at every
  arrival (p50 and p99 over all replicas and arrivals);
* **max / mean load**: the busiest replica's time-averaged requests in
  flight over the fleet's mean.

Queue depths and loads are measured while sessions keep arriving, from a
quarter of ``--minutes`` on (the fleet starts empty; after the last arrival
it drains). Cache hits count over the whole run.

Goals (issue 33): ``prefix`` >= 0.9 of ideal at N = 4 and 16;
``least_outstanding`` about 1/N (on the tokens past the shared prefix); no
replica over 1.3 x the mean load.

The trace (every number a parameter below; seeded, the same for every
policy). Sizes are shaped on the captured Claude Code 2.1.332 first request
(12,374 tokens: system prompt, tool schemas, environment;
docs/clients/claude-code.md) and on the issue's 12-60k-token prompts; the
turn lengths and think times are assumptions of this simulator, not
measurements (no long captured session is in the repository):

* a session: a **main conversation** whose first prompt is a prefix shared by
  all sessions (``SHARED``: the system prompt's fixed part), the session's
  environment (``ENV``) and the tool schemas (``TOOLS``: after the
  environment, as templates render tools into the system turn, so shared
  only within the session); then turns, each adding a tool result or user
  message (lognormal, median ``TURN_IN``) and the answer (median
  ``TURN_OUT``) after a think time (tool execution, median ``TOOL_THINK`` s;
  every ``USER_EVERY`` turns on average a user's, median ``USER_THINK`` s),
  until ``MAX_PROMPT`` tokens (where Claude Code compacts) or its turn count;
* **side requests** (Claude Code's haiku-class calls: titles, topic checks,
  summaries): two at the start and with probability ``SIDE_P`` per turn,
  sent without waiting, sharing only a short prefix among all sessions;
* **subagents** (the Task tool): with probability ``SUB_P`` per turn, a
  conversation of its own (a prefix shared by all subagents, then its task)
  of a few turns, while the main conversation waits for its result.

A request takes ``uncached / PREFILL`` + ``output / DECODE`` seconds on its
replica (continuous batching: requests in flight do not slow each other; the
cache decides how long each takes). A replica's cache holds the blocks of
every prompt it prefilled and every answer it wrote, least recently used
evicted first, leaves before their prefixes (vLLM's and SGLang's order), in
blocks of ``BLOCK`` tokens; the router's index is sized to the same number of
tokens (``prefix_cache_tokens``) but sees only prompts, never answers, as in
Missive.

    .venv/bin/python benchmarks/sim_routing.py [--replicas 4 16] [--sessions-per-replica 8]
        [--cache-tokens 400000] [--minutes 30] [--load-bound 1.25] [--load-slack 2] [--seed 1]
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
import statistics
import sys
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "core"))

from missive.routing.policy import LeastOutstanding, PrefixAffinity  # noqa: E402
from missive.routing.prefix import PrefixIndex, RouteKey, _chain  # noqa: E402

BLOCK = 64  # tokens per block, of the caches and of the router's keys
SHARED, ENV, TOOLS = 3_000, 1_400, 8_000  # first prompt 12,400 tokens (captured: 12,374)
TURN_IN, TURN_IN_SIGMA, TURN_IN_MAX = 500, 1.0, 8_000  # tool results, file reads, user messages
TURN_OUT, TURN_OUT_SIGMA, TURN_OUT_MAX = 200, 0.8, 2_000
TURNS = (8, 40)
MAX_PROMPT = 60_000
TOOL_THINK, USER_THINK, USER_EVERY = 1.5, 30.0, 6
SIDE_SHARED, SIDE_IN, SIDE_OUT, SIDE_P = 300, (200, 2_000), 30, 0.1
SUB_SHARED, SUB_TASK, SUB_TURNS, SUB_P = 7_000, 400, (3, 10), 0.08
PREFILL, DECODE = 8_000.0, 60.0  # tokens/s of one request on one replica


class Tokens:
    """Fresh token ids (content nobody else has), and the shared prefixes."""

    def __init__(self) -> None:
        self._next = itertools.count(1_000_000)
        self.shared = self.fresh(SHARED)
        self.side_shared = self.fresh(SIDE_SHARED)
        self.sub_shared = self.fresh(SUB_SHARED)

    def fresh(self, n: int) -> list[int]:
        start = next(self._next)
        for _ in range(n - 1):
            next(self._next)
        return list(range(start, start + n))


class Conversation:
    """A prompt growing turn by turn, with its chained block hashes kept up to date."""

    def __init__(self, tokens: list[int]) -> None:
        self.length = 0
        self.last: object | None = None  # the replica of its previous turn
        self.blocks: list[int] = []
        self._tail: list[int] = []
        self.append(tokens)

    def append(self, tokens: list[int]) -> None:
        self.length += len(tokens)
        new, self._tail = self._blocks_of(tokens)
        self.blocks.extend(new)

    def extended(self, tokens: list[int]) -> tuple[int, ...]:
        """The blocks once ``tokens`` are appended (the conversation unchanged)."""
        return (*self.blocks, *self._blocks_of(tokens)[0])

    def _blocks_of(self, tokens: list[int]) -> tuple[list[int], list[int]]:
        tail = self._tail + tokens
        whole = len(tail) - len(tail) % BLOCK
        last = self.blocks[-1] if self.blocks else 0
        chunks = (tuple(tail[i : i + BLOCK]) for i in range(0, whole, BLOCK))
        return _chain_from(last, chunks), tail[whole:]


def _chain_from(last: int, chunks: Any) -> list[int]:
    out = []
    for chunk in chunks:
        last = hash((last, chunk))
        out.append(last)
    return out


assert _chain_from(0, [(1,), (2,)]) == list(_chain([(1,), (2,)]))  # the router's chaining


@dataclass
class Request:
    conv: Conversation
    session: str
    answer: list[int]
    blocks: tuple[int, ...] = ()
    prompt: int = 0
    shared: int = 0  # leading tokens every session has


@dataclass(eq=False)
class Replica:
    """A simulated replica: its cache, its requests in flight, and their
    time integral over the measured window (``window``: from when, to when)."""

    url: str
    cache: PrefixIndex
    window: tuple[float, float]
    outstanding: int = 0
    busy_integral: float = 0.0
    last_change: float = 0.0

    def change(self, now: float, delta: int) -> None:
        start, end = max(self.last_change, self.window[0]), min(now, self.window[1])
        if end > start:
            self.busy_integral += self.outstanding * (end - start)
        self.last_change = now
        self.outstanding += delta


def lognormal(rng: random.Random, median: float, sigma: float, cap: float) -> int:
    return max(1, min(int(cap), int(rng.lognormvariate(math.log(median), sigma))))


Command = tuple[str, Any]


def session(sid: int, seed: int, tokens: Tokens) -> Generator[Command, Any, None]:
    """One Claude Code-like session (see the module doc); yields ``("sleep", s)``,
    ``("call", request)`` (wait for it) and ``("fire", request)`` (do not)."""
    rng = random.Random(seed * 1_000_003 + sid)
    name = f"session-{sid}"
    main = Conversation(tokens.shared + tokens.fresh(ENV) + tokens.fresh(TOOLS))
    for _ in range(2):
        side = Conversation(tokens.side_shared + tokens.fresh(rng.randint(*SIDE_IN)))
        yield "fire", Request(side, name, tokens.fresh(SIDE_OUT), shared=SIDE_SHARED)
    for turn in range(rng.randint(*TURNS)):
        if turn:
            user = rng.random() < 1 / USER_EVERY
            yield "sleep", rng.lognormvariate(math.log(USER_THINK if user else TOOL_THINK), 0.8)
            main.append(tokens.fresh(lognormal(rng, TURN_IN, TURN_IN_SIGMA, TURN_IN_MAX)))
        if main.length > MAX_PROMPT:
            return
        if rng.random() < SIDE_P:
            side = Conversation(tokens.side_shared + tokens.fresh(rng.randint(*SIDE_IN)))
            yield "fire", Request(side, name, tokens.fresh(SIDE_OUT), shared=SIDE_SHARED)
        answer = tokens.fresh(lognormal(rng, TURN_OUT, TURN_OUT_SIGMA, TURN_OUT_MAX))
        yield "call", Request(main, name, answer, shared=SHARED)
        main.append(answer)
        if rng.random() < SUB_P:
            sub = Conversation(tokens.sub_shared + tokens.fresh(SUB_TASK))
            for sub_turn in range(rng.randint(*SUB_TURNS)):
                if sub_turn:
                    yield "sleep", rng.lognormvariate(math.log(TOOL_THINK), 0.8)
                    sub.append(tokens.fresh(lognormal(rng, TURN_IN, TURN_IN_SIGMA, TURN_IN_MAX)))
                sub_answer = tokens.fresh(lognormal(rng, TURN_OUT, TURN_OUT_SIGMA, TURN_OUT_MAX))
                yield "call", Request(sub, name, sub_answer, shared=SUB_SHARED)
                sub.append(sub_answer)
            main.append(tokens.fresh(lognormal(rng, TURN_OUT, TURN_OUT_SIGMA, TURN_OUT_MAX)))  # its result


@dataclass
class Result:
    policy: str
    replicas: int
    requests: int = 0
    hit: int = 0
    ideal: int = 0
    hit_beyond_shared: int = 0
    ideal_beyond_shared: int = 0
    later_turns: int = 0
    same_replica: int = 0
    depths: list[int] = field(default_factory=list)
    max_over_mean: float = 0.0

    def row(self) -> str:
        depths = sorted(self.depths)
        p50 = depths[len(depths) // 2]
        p99 = depths[min(len(depths) - 1, int(len(depths) * 0.99))]
        return (
            f"| {self.policy} | {self.replicas} | {self.requests:,} | "
            f"{self.same_replica / max(1, self.later_turns):.3f} | {self.hit / self.ideal:.3f} | "
            f"{self.hit_beyond_shared / max(1, self.ideal_beyond_shared):.3f} | {p50} | {p99} | "
            f"{self.max_over_mean:.2f} |"
        )


def simulate(policy_name: str, n: int, args: argparse.Namespace) -> Result:
    capacity = args.cache_tokens // BLOCK
    # Load is measured while sessions keep arriving, after the first ones
    # settled (a fleet starting empty or draining is balanced by nothing).
    window = (args.minutes * 60 / 4, args.minutes * 60)
    replicas = [Replica(f"http://replica{i}:8000", PrefixIndex(capacity), window) for i in range(n)]
    policy: LeastOutstanding = (
        PrefixAffinity(args.load_bound, capacity, load_slack=args.load_slack)
        if policy_name == "prefix"
        else LeastOutstanding()
    )
    ideal: set[int] = set()
    tokens = Tokens()
    result = Result(policy_name, n)
    heap: list[tuple[float, int, Callable[[], None]]] = []
    order = itertools.count()
    now = 0.0

    def at(when: float, action: Callable[[], None]) -> None:
        heapq.heappush(heap, (when, next(order), action))

    def ideal_depth(blocks: tuple[int, ...]) -> int:
        return next((i for i, b in enumerate(blocks) if b not in ideal), len(blocks))

    def send(request: Request, done: Callable[[], None] | None) -> None:
        request.blocks, request.prompt = tuple(request.conv.blocks), request.conv.length
        if window[0] <= now <= window[1]:
            result.depths.extend(r.outstanding for r in replicas)
        replica, _ = policy.choose(replicas, RouteKey(request.blocks, request.session))
        hit = min(request.prompt, replica.cache.depth(replica, request.blocks) * BLOCK)
        best = min(request.prompt, ideal_depth(request.blocks) * BLOCK)
        result.requests += 1
        if request.conv.last is not None:
            result.later_turns += 1
            result.same_replica += request.conv.last is replica
        request.conv.last = replica
        result.hit += hit
        result.ideal += best
        result.hit_beyond_shared += max(0, hit - request.shared)
        result.ideal_beyond_shared += max(0, best - request.shared)
        replica.cache.insert(replica, request.blocks)
        ideal.update(request.blocks)
        replica.change(now, +1)
        seconds = (request.prompt - hit) / PREFILL + len(request.answer) / DECODE

        def finish() -> None:
            replica.change(now, -1)
            answered = request.conv.extended(request.answer)  # the replica holds its answer too
            replica.cache.insert(replica, answered)
            ideal.update(answered)
            if done is not None:
                done()

        at(now + seconds, finish)

    def step(process: Generator[Command, Any, None]) -> None:
        while True:
            try:
                kind, value = next(process)
            except StopIteration:
                return
            if kind == "sleep":
                at(now + value, lambda: step(process))
                return
            if kind == "fire":
                send(value, None)
                continue
            send(value, lambda: step(process))
            return

    rng = random.Random(args.seed)
    # Sessions arrive as a Poisson process sized so that about
    # sessions_per_replica x N are running at once (Little's law with the
    # mean session length measured in a short first pass would be exact;
    # the mean of this trace is about 9 minutes).
    mean_session = 540.0
    rate = args.sessions_per_replica * n / mean_session
    arrival, sid = 0.0, 0
    while arrival < args.minutes * 60:
        process = session(sid, args.seed, tokens)
        at(arrival, lambda p=process: step(p))
        arrival += rng.expovariate(rate)
        sid += 1
    while heap:
        now, _, action = heapq.heappop(heap)
        action()
    for replica in replicas:
        replica.change(now, 0)
    loads = [r.busy_integral for r in replicas]
    result.max_over_mean = max(loads) / statistics.fmean(loads)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--sessions-per-replica", type=float, default=8)
    parser.add_argument("--cache-tokens", type=int, default=400_000)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--load-bound", type=float, default=1.25)
    parser.add_argument("--load-slack", type=float, default=2.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--check", action="store_true", help="exit 1 when a goal is not met")
    args = parser.parse_args()
    print(
        f"cache {args.cache_tokens:,} tokens per replica, {args.sessions_per_replica:g} sessions per "
        f"replica, {args.minutes:g} min of arrivals, load_bound {args.load_bound:g}, "
        f"load_slack {args.load_slack:g}, seed {args.seed}\n"
    )
    print(
        "| policy | replicas | requests | later turns on their last replica | hit / ideal | "
        "hit / ideal past the shared prefix | queue p50 | queue p99 | max / mean load |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed = []
    for n in args.replicas:
        for name in ("least_outstanding", "prefix"):
            result = simulate(name, n, args)
            print(result.row(), flush=True)
            if name == "prefix" and (result.hit < 0.9 * result.ideal or result.max_over_mean > 1.3):
                failed.append(f"prefix at N={n}")
    if args.check and failed:
        print("goal not met: " + ", ".join(failed))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
