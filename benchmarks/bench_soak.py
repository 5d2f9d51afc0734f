"""Soak: concurrent streaming clients against the echo driver for minutes; the
server's memory, descriptors and sockets must stay flat.

A ``missive serve`` on the echo driver gets ``--clients`` (64) concurrent
httpx clients, each streaming ``--tokens``-token (64) echo answers one after
another for ``--seconds`` (600). Like real clients, each one also leaves in
the ways that leaked before (issue 16): every ``--reconnect-every`` answers
(10) it closes its connection and opens a new one, and every
``--abandon-every`` answers (25) it leaves the stream after its first text
delta. Every answer read to the end must be complete (``message_stop``,
the full text and usage); anything else is an error.

Measured on the server process (Linux ``/proc``): resident memory when idle,
after ``--warmup`` seconds of load ("start") and at the end; open descriptors
when idle ("start") and at the end; sockets in ``CLOSE-WAIT`` at the end. The
end is taken after the clients closed their connections and ``--settle``
seconds (3) passed. ``--check`` exits 1 if an answer failed, the descriptors
grew by more than ``--fd-slack`` (4), any socket is left in CLOSE-WAIT, or
resident memory grew by more than 20 % from start to end.

    .venv/bin/python benchmarks/bench_soak.py [--seconds 600] [--clients 64] [--check] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from missive.testing import ServerProcess, open_fds, rss_mib, serve_process, tcp_states

#: Resident memory may grow this much from start (after the warm-up) to end.
RSS_GROWTH = 0.20


@dataclass
class SoakResult:
    """What one soak run measured (memory in MiB)."""

    seconds: float
    clients: int
    streams: int = 0
    abandoned: int = 0
    reconnects: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    rss_idle: float = 0.0
    rss_start: float = 0.0
    rss_end: float = 0.0
    fds_start: int = 0
    fds_peak: int = 0
    fds_end: int = 0
    close_wait_end: int = 0
    sockets_end: dict[str, int] = field(default_factory=dict)

    def problems(self, fd_slack: int = 4, rss_growth: float = RSS_GROWTH) -> list[str]:
        """Why the run fails ``--check`` (empty: it passes)."""
        found = []
        if self.errors:
            found.append(f"{self.errors} answers failed: {self.error_kinds}")
        if self.streams == 0:
            found.append("no answer completed")
        if self.fds_end > self.fds_start + fd_slack:
            found.append(f"open descriptors grew from {self.fds_start} to {self.fds_end} (slack {fd_slack})")
        if self.close_wait_end:
            found.append(f"{self.close_wait_end} sockets left in CLOSE-WAIT")
        if self.rss_end > self.rss_start * (1 + rss_growth):
            found.append(
                f"resident memory grew from {self.rss_start:.1f} to {self.rss_end:.1f} MiB "
                f"(over {rss_growth:.0%})"
            )
        return found


def _body(tokens: int) -> dict[str, Any]:
    words = " ".join(f"w{i}" for i in range(tokens))
    return {
        "model": "echo",
        "max_tokens": tokens,
        "stream": True,
        "messages": [{"role": "user", "content": words}],
    }


def _check_answer(text: str, tokens: int) -> str | None:
    """Why a streamed answer read to its end is wrong, or None."""
    events = [line[len("event: ") :] for line in text.splitlines() if line.startswith("event: ")]
    if not events or events[-1] != "message_stop":
        return f"ended with {events[-1] if events else 'nothing'}"
    usage = None
    for line in text.splitlines():
        if line.startswith("data: ") and '"message_delta"' in line:
            usage = json.loads(line[len("data: ") :])["usage"]
    if usage is None or usage.get("output_tokens") != tokens:
        return f"usage {usage}"
    return None


async def _client(
    url: str, args: argparse.Namespace, deadline: float, result: SoakResult, errors: Counter[str]
) -> None:
    body = _body(args.tokens)
    timeout = httpx.Timeout(60.0)
    http = httpx.AsyncClient(base_url=url, timeout=timeout, limits=httpx.Limits(max_connections=1))
    n = 0
    try:
        while time.monotonic() < deadline:
            n += 1
            if args.reconnect_every and n % args.reconnect_every == 0:
                await http.aclose()  # the client goes; its keep-alive connection with it
                http = httpx.AsyncClient(
                    base_url=url, timeout=timeout, limits=httpx.Limits(max_connections=1)
                )
                result.reconnects += 1
            abandon = bool(args.abandon_every) and n % args.abandon_every == 0
            try:
                async with http.stream("POST", "/v1/messages", json=body) as response:
                    if response.status_code != 200:
                        errors[f"HTTP {response.status_code}"] += 1
                        await response.aread()
                        continue
                    if abandon:
                        async for line in response.aiter_lines():
                            if line == "event: content_block_delta":
                                break  # leave mid-answer: httpx closes the connection
                        result.abandoned += 1
                        continue
                    text = (await response.aread()).decode()
                problem = _check_answer(text, args.tokens)
                if problem is not None:
                    errors[problem[:80]] += 1
                else:
                    result.streams += 1
            except httpx.HTTPError as exc:
                errors[type(exc).__name__] += 1
    finally:
        await http.aclose()


async def soak(server: ServerProcess, args: argparse.Namespace) -> SoakResult:
    """Run the load of the module doc against ``server`` and measure it."""
    pid = server.process.pid
    result = SoakResult(seconds=args.seconds, clients=args.clients)
    # One answer on a connection the server closes itself: what the first
    # request opens lazily is in the baseline.
    async with httpx.AsyncClient(base_url=server.url, timeout=30, headers={"connection": "close"}) as http:
        response = await http.post("/v1/messages", json={**_body(args.tokens), "stream": False})
        response.raise_for_status()
    await asyncio.sleep(0.5)
    result.rss_idle = rss_mib(pid)
    result.fds_start = result.fds_peak = open_fds(pid)
    errors: Counter[str] = Counter()
    began = time.monotonic()
    deadline = began + args.seconds
    tasks = [
        asyncio.create_task(_client(server.url, args, deadline, result, errors)) for _ in range(args.clients)
    ]
    warmup = min(args.warmup, args.seconds / 2)
    next_report = began + args.report_every
    measured_start = False
    while not all(t.done() for t in tasks):
        await asyncio.wait(tasks, timeout=1.0)
        now = time.monotonic()
        result.fds_peak = max(result.fds_peak, open_fds(pid))
        if not measured_start and now - began >= warmup:
            result.rss_start = rss_mib(pid)
            measured_start = True
        if args.report_every and now >= next_report:
            next_report += args.report_every
            print(
                f"  {now - began:6.0f} s: {result.streams} answers, {sum(errors.values())} errors, "
                f"RSS {rss_mib(pid):.1f} MiB, {open_fds(pid)} descriptors",
                file=sys.stderr,
                flush=True,
            )
    for task in tasks:
        task.result()
    if not measured_start:
        result.rss_start = rss_mib(pid)
    await asyncio.sleep(args.settle)
    result.rss_end = rss_mib(pid)
    result.fds_end = open_fds(pid)
    result.sockets_end = tcp_states(pid)
    result.close_wait_end = result.sockets_end.get("CLOSE_WAIT", 0)
    result.errors = sum(errors.values())
    result.error_kinds = dict(errors)
    return result


def run_soak(args: argparse.Namespace) -> SoakResult:
    """Start a ``missive serve`` on the echo driver and :func:`soak` it."""
    config = {"models": {"echo": {"driver": "echo", "context_window": 4096}}}
    with serve_process(config) as server:
        return asyncio.run(soak(server, args))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of the module doc (``argv`` None: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0, help="duration of the load (600)")
    parser.add_argument("--clients", type=int, default=64, help="concurrent streaming clients (64)")
    parser.add_argument("--tokens", type=int, default=64, help="tokens per answer (64)")
    parser.add_argument(
        "--reconnect-every", type=int, default=10, help="answers per connection (10; 0: never)"
    )
    parser.add_argument(
        "--abandon-every", type=int, default=25, help="every Nth answer is left mid-stream (25; 0: never)"
    )
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds before resident memory 'start' (10)"
    )
    parser.add_argument("--settle", type=float, default=3.0, help="seconds after the load before the end (3)")
    parser.add_argument(
        "--fd-slack", type=int, default=4, help="descriptors the end may hold above the start (4)"
    )
    parser.add_argument(
        "--report-every", type=float, default=30.0, help="progress line period, s (30; 0: none)"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 if the run breaks a limit (module doc)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser.parse_args(argv)


def main() -> None:
    """Run the soak and print its figures; with ``--check``, exit 1 on a problem."""
    args = parse_args()
    result = run_soak(args)
    problems = result.problems(fd_slack=args.fd_slack)
    if args.json:
        print(json.dumps({**asdict(result), "problems": problems}, indent=2))
    else:
        r = result
        print(
            f"{r.clients} clients, {r.seconds:g} s: {r.streams} answers read to the end "
            f"({r.streams / r.seconds:.0f}/s), {r.abandoned} left mid-stream, {r.reconnects} reconnects, "
            f"{r.errors} errors {r.error_kinds or ''}".rstrip()
        )
        print(
            f"resident memory: idle {r.rss_idle:.1f} MiB, start {r.rss_start:.1f} MiB, end {r.rss_end:.1f} "
            f"MiB ({(r.rss_end / r.rss_start - 1) * 100:+.1f} %)"
        )
        print(
            f"open descriptors: start {r.fds_start}, peak {r.fds_peak}, end {r.fds_end}; "
            f"CLOSE-WAIT at the end: {r.close_wait_end}; sockets at the end: {r.sockets_end}"
        )
        print("check: " + ("; ".join(problems) if problems else "ok"))
    if args.check and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
