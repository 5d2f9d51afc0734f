"""A flood of requests with wrong API keys (issue 32): answered cheaply, with
no model work and no memory kept per bad key.

A ``missive serve`` on the echo driver with API keys (``--keys`` named keys
and one plain key) gets ``--requests`` (10,000) ``POST /v1/messages`` from
``--concurrency`` (16) keep-alive HTTP/1.1 connections, each request with a different
random wrong key (half as ``x-api-key``, half as ``Authorization:
Bearer``) and a valid body. Every answer must be 401
``authentication_error`` in the API's envelope.

Measured on the server process (Linux ``/proc``): resident memory after a
warm-up of ``--warmup`` (500) bad-key requests ("before") and after the
flood ("after"), and its CPU time per request; the baselines, in the same
run and on the same connections: valid-key ``POST /v1/messages`` answered
by the echo model (``--baseline`` requests, 1,000) and ``GET /livez`` (no
key, the cheapest route). From ``/metrics`` (an admin key): the flood added
exactly ``--requests`` 401s, no message was started (no model work:
``missive:e2e_request_latency_seconds_count`` and
``missive:prompt_tokens_total`` unchanged) and no ``missive:key_*`` series
was made; and the log holds none of the wrong keys. ``--check`` exits 1
when any of that fails or resident memory grew by more than ``--rss-slack``
MiB (64).

    .venv/bin/python benchmarks/bench_bad_keys.py [--requests 10000] [--check] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import re
import secrets
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from missive.testing import ServerProcess, rss_mib, serve_process

ADMIN = "sk-bench-admin-" + "a" * 32
USER = "sk-bench-user-" + "b" * 32
BODY = {"model": "echo", "max_tokens": 8, "messages": [{"role": "user", "content": "one two three"}]}
WRONG = re.compile(r"sk-wrong-[0-9a-f]{32}")


@dataclass
class FloodResult:
    """What one run measured (memory in MiB, CPU in ms per request)."""

    requests: int
    statuses: dict[str, int] = field(default_factory=dict)
    bad_envelopes: int = 0
    seconds: float = 0.0
    rss_before: float = 0.0
    rss_after: float = 0.0
    cpu_ms_bad_key: float = 0.0
    cpu_ms_valid_message: float = 0.0
    cpu_ms_livez: float = 0.0
    counted_401: float = 0.0
    messages_started: float = 0.0
    prompt_tokens: float = 0.0
    key_series_added: list[str] = field(default_factory=list)
    keys_in_log: int = 0

    def problems(self, rss_slack: float = 64.0) -> list[str]:
        """Why the run fails ``--check`` (empty: it passes)."""
        found = []
        if self.statuses != {"401": self.requests} or self.bad_envelopes:
            found.append(f"answers {self.statuses}, {self.bad_envelopes} not the API's 401 envelope")
        if self.counted_401 != self.requests:
            found.append(f"/metrics counted {self.counted_401:g} 401s, not {self.requests}")
        if self.messages_started or self.prompt_tokens:
            found.append(
                f"model work: {self.messages_started:g} messages, {self.prompt_tokens:g} prompt tokens"
            )
        if self.key_series_added:
            found.append(f"key series made by bad keys: {self.key_series_added[:5]}")
        if self.keys_in_log:
            found.append(f"{self.keys_in_log} wrong keys written to the log")
        if self.rss_after - self.rss_before > rss_slack:
            found.append(
                f"resident memory grew from {self.rss_before:.1f} to {self.rss_after:.1f} MiB "
                f"(over {rss_slack:g} MiB)"
            )
        return found


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds of ``pid`` (Linux ``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    text = httpx.get(f"{url}/metrics", headers={"x-api-key": ADMIN}, timeout=30).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def total(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return sum(v for (n, ls), v in samples.items() if n == name and set(labels.items()) <= ls)


async def _load(
    url: str, count: int, concurrency: int, make: Any, statuses: Counter[str], envelopes: list[int]
) -> None:
    """``count`` requests (``make(i) -> (method, path, headers, body)``) over
    ``concurrency`` keep-alive HTTP/1.1 connections, written and read with
    asyncio streams: a client far lighter than the server, so the flood's
    wall time is the server's (httpx took more CPU per request than the
    server it measured)."""
    host, port = url.rsplit("/", 1)[1].rsplit(":", 1)
    queue = iter(range(count))

    async def connection() -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for i in queue:
                method, path, headers, body = make(i)
                payload = b"" if body is None else json.dumps(body).encode()
                head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
                writer.write(
                    f"{method} {path} HTTP/1.1\r\nhost: {host}:{port}\r\ncontent-type: application/json\r\n"
                    f"content-length: {len(payload)}\r\n{head}\r\n".encode()
                    + payload
                )
                status = int((await reader.readline()).split()[1])
                length = None
                while (line := await reader.readline()) not in (b"\r\n", b""):
                    name, _, value = line.decode("latin-1").partition(":")
                    if name.strip().lower() == "content-length":
                        length = int(value)
                if length is None:
                    raise RuntimeError(f"{method} {path}: an answer without content-length")
                answer = await reader.readexactly(length)
                statuses[str(status)] += 1
                if status == 401:
                    error = json.loads(answer)
                    if error.get("type") != "error" or error["error"]["type"] != "authentication_error":
                        envelopes[0] += 1
        finally:
            writer.close()
            await writer.wait_closed()

    await asyncio.gather(*(connection() for _ in range(concurrency)))


async def _timed(
    server: ServerProcess,
    count: int,
    concurrency: int,
    make: Any,
) -> tuple[float, float, Counter[str], int]:
    """CPU ms per request, wall seconds, statuses and bad envelopes of one load."""
    statuses: Counter[str] = Counter()
    envelopes = [0]
    cpu, began = cpu_seconds(server.process.pid), time.monotonic()
    await _load(server.url, count, concurrency, make, statuses, envelopes)
    seconds = time.monotonic() - began
    return (cpu_seconds(server.process.pid) - cpu) * 1000 / count, seconds, statuses, envelopes[0]


def _bad(i: int) -> tuple[str, str, dict[str, str], dict[str, Any]]:
    key = f"sk-wrong-{secrets.token_hex(16)}"
    headers = {"x-api-key": key} if i % 2 else {"authorization": f"Bearer {key}"}
    return "POST", "/v1/messages", headers, BODY


async def flood(server: ServerProcess, args: argparse.Namespace) -> FloodResult:
    """The load of the module doc against ``server``, measured."""
    result = FloodResult(requests=args.requests)
    pid = server.process.pid
    await _timed(server, args.warmup, args.concurrency, _bad)
    await asyncio.sleep(0.5)
    before = scrape(server.url)
    result.rss_before = rss_mib(pid)
    result.cpu_ms_bad_key, result.seconds, statuses, result.bad_envelopes = await _timed(
        server, args.requests, args.concurrency, _bad
    )
    await asyncio.sleep(0.5)
    result.rss_after = rss_mib(pid)
    after = scrape(server.url)
    result.statuses = dict(statuses)
    result.counted_401 = total(after, "missive:requests_total", status="401") - total(
        before, "missive:requests_total", status="401"
    )
    result.messages_started = total(after, "missive:e2e_request_latency_seconds_count") - total(
        before, "missive:e2e_request_latency_seconds_count"
    )
    result.prompt_tokens = total(after, "missive:prompt_tokens_total") - total(
        before, "missive:prompt_tokens_total"
    )
    result.key_series_added = sorted(
        {
            dict(ls).get("key_name", "")
            for (n, ls) in after
            if n.startswith("missive:key_") and (n, ls) not in before
        }
    )
    result.keys_in_log = len(set(WRONG.findall(server.log())))
    if args.baseline:  # after the measurement (they start messages)
        result.cpu_ms_livez, _, _, _ = await _timed(
            server, args.baseline, args.concurrency, lambda i: ("GET", "/livez", {}, None)
        )
        result.cpu_ms_valid_message, _, _, _ = await _timed(
            server,
            args.baseline,
            args.concurrency,
            lambda i: ("POST", "/v1/messages", {"x-api-key": USER}, BODY),
        )
    return result


def run_flood(args: argparse.Namespace) -> FloodResult:
    """Start a ``missive serve`` on the echo driver with keys and :func:`flood` it."""
    keys: dict[str, Any] = {
        f"user{i}": {
            "key_sha256": hashlib.sha256(f"sk-bench-{i}".encode()).hexdigest(),
            "requests_per_minute": 60,
        }
        for i in range(args.keys)
    }
    keys["ops"] = {"key_sha256": hashlib.sha256(ADMIN.encode()).hexdigest(), "scope": "admin"}
    config = {
        "server": {"api_keys": [USER]},
        "keys": keys,
        "models": {"echo": {"driver": "echo", "context_window": 4096}},
    }
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(serve_process(config))
        return asyncio.run(flood(server, args))


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of the module doc (``argv`` None: ``sys.argv``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=10_000, help="bad-key requests (10000)")
    parser.add_argument("--concurrency", type=int, default=16, help="keep-alive connections (16)")
    parser.add_argument("--warmup", type=int, default=500, help="bad-key requests before 'before' (500)")
    parser.add_argument(
        "--baseline", type=int, default=1000, help="requests of each baseline (1000; 0: none)"
    )
    parser.add_argument("--keys", type=int, default=50, help="named keys configured (50)")
    parser.add_argument("--rss-slack", type=float, default=64.0, help="MiB resident memory may grow (64)")
    parser.add_argument("--check", action="store_true", help="exit 1 if the run breaks a limit (module doc)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    return parser.parse_args(argv)


def main() -> None:
    """Run the flood and print its figures; with ``--check``, exit 1 on a problem."""
    args = parse_args()
    result = run_flood(args)
    problems = result.problems(rss_slack=args.rss_slack)
    if args.json:
        print(json.dumps({**asdict(result), "problems": problems}, indent=2))
    else:
        r = result
        print(
            f"{r.requests} bad-key requests in {r.seconds:.1f} s ({r.requests / r.seconds:.0f}/s, "
            f"{args.concurrency} connections): {r.statuses}"
        )
        print(
            f"resident memory: before {r.rss_before:.1f} MiB, after {r.rss_after:.1f} MiB "
            f"({r.rss_after - r.rss_before:+.1f} MiB)"
        )
        print(
            f"server CPU per request: bad key {r.cpu_ms_bad_key:.3f} ms"
            + (
                f", GET /livez {r.cpu_ms_livez:.3f} ms ({r.cpu_ms_bad_key / r.cpu_ms_livez:.2f}x), valid-key "
                "echo "
                f"message {r.cpu_ms_valid_message:.3f} ms ({r.cpu_ms_bad_key / r.cpu_ms_valid_message:.2f}x)"
                if args.baseline
                else ""
            )
        )
        print(
            f"/metrics: {r.counted_401:g} 401s counted, {r.messages_started:g} messages started, "
            f"{r.prompt_tokens:g} prompt tokens, key series made: {r.key_series_added or 'none'}; "
            f"wrong keys in the log: {r.keys_in_log}"
        )
        print("check: " + ("; ".join(problems) if problems else "ok"))
    if args.check and problems:
        sys.exit(1)


if __name__ == "__main__":
    main()
