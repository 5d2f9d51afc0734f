"""HTTP load generators for the gateway benchmark: wrk when installed, else Python.

:func:`run_load` sends the same ``POST`` (a JSON body) over ``connections``
keep-alive connections for ``seconds`` and returns a :class:`LoadResult`:
requests per second, the latency median, and the failures (non-2xx answers,
socket errors). Every answer is read to its end (a streamed one to its last
chunk), so a stream counts once it is complete.

* ``wrk`` (https://github.com/wg/wrk, ``apt-get install wrk``): used when on
  ``PATH``; a Lua script sets the method, body and headers. One wrk thread:
  it is event-driven C and needs far less CPU than the servers measured.
* otherwise a Python generator: ``processes`` worker processes, each running
  its share of the connections as raw asyncio sockets (HTTP/1.1,
  ``content-length`` and chunked bodies), with uvloop when importable.

Either way, the benchmark also measures the generator against the instant
backend alone, which shows the most it can drive on this machine.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

__all__ = ["LoadResult", "generator_name", "run_load"]


@dataclass
class LoadResult:
    """One load run: ``rps`` requests/s, ``p50_ms`` latency median (ms),
    ``requests`` completed, ``errors`` (non-2xx answers and socket errors)."""

    rps: float
    p50_ms: float
    requests: int
    errors: int


def generator_name(force_python: bool = False) -> str:
    """``"wrk"`` when it will be used, else ``"python"``."""
    return "wrk" if shutil.which("wrk") and not force_python else "python"


def run_load(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    connections: int,
    seconds: float,
    force_python: bool = False,
    processes: int = 2,
) -> LoadResult:
    """``POST url`` with ``body`` and ``headers`` for ``seconds`` over ``connections``."""
    if generator_name(force_python) == "wrk":
        return _wrk(url, body, headers, connections, seconds)
    return _python(url, body, headers, connections, seconds, processes)


# -- wrk ------------------------------------------------------------------------

_LUA = """
local f = io.open(os.getenv("BENCH_BODY_FILE"), "rb")
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
{headers}
"""

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def _duration_ms(text: str) -> float:
    match = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if match is None:
        raise ValueError(f"unexpected wrk duration {text!r}")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _wrk(url: str, body: bytes, headers: dict[str, str], connections: int, seconds: float) -> LoadResult:
    with tempfile.TemporaryDirectory(prefix="bench-wrk-") as tmp:
        body_file = Path(tmp) / "body.json"
        body_file.write_bytes(body)
        lines = "\n".join(f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items())
        script = Path(tmp) / "post.lua"
        script.write_text(_LUA.format(headers=lines))
        cmd = [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{max(1, round(seconds))}s",
            "--latency",
            "-s",
            str(script),
            "--timeout",
            "10s",
            url,
        ]
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            env={**os.environ, "BENCH_BODY_FILE": str(body_file)},
            check=True,
        ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    errors = 0
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    if non2xx:
        errors += int(non2xx.group(1))
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if sockets:
        errors += sum(int(n) for n in sockets.groups())
    return LoadResult(
        rps=rps, p50_ms=_duration_ms(p50.group(1)) if p50 else float("nan"), requests=requests, errors=errors
    )


# -- Python ---------------------------------------------------------------------


def _request_bytes(url: str, body: bytes, headers: dict[str, str]) -> tuple[str, int, bytes]:
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    head = [f"POST {parts.path or '/'} HTTP/1.1", f"host: {host}:{port}", f"content-length: {len(body)}"]
    head += [f"{k}: {v}" for k, v in headers.items()]
    return host, port, ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    """Read one response to its end; its status."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lower = head.lower()
    at = lower.find(b"content-length:")
    if at >= 0:
        length = int(lower[at + 15 : lower.find(b"\r\n", at)])
        await reader.readexactly(length)
        return status
    while True:  # chunked
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        await reader.readexactly(size + 2)
        if size == 0:
            return status


async def _connection(host: str, port: int, request: bytes, deadline: float, latencies: list[float]) -> int:
    errors = 0
    while time.monotonic() < deadline:
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            errors += 1
            await asyncio.sleep(0.01)
            continue
        try:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                writer.write(request)
                status = await _read_response(reader)
                if 200 <= status < 300:
                    latencies.append(time.perf_counter() - started)
                else:
                    errors += 1
        except (OSError, asyncio.IncompleteReadError, ValueError):
            errors += 1
        finally:
            writer.close()
    return errors


def _worker(
    host: str, port: int, request: bytes, connections: int, seconds: float, queue: multiprocessing.Queue
) -> None:
    async def main() -> tuple[list[float], int]:
        latencies: list[float] = []
        deadline = time.monotonic() + seconds
        errors = await asyncio.gather(
            *(_connection(host, port, request, deadline, latencies) for _ in range(connections))
        )
        return latencies, sum(errors)

    try:
        import uvloop

        latencies, errors = uvloop.run(main())
    except ImportError:
        latencies, errors = asyncio.run(main())
    queue.put((latencies, errors))


def _python(
    url: str, body: bytes, headers: dict[str, str], connections: int, seconds: float, processes: int
) -> LoadResult:
    host, port, request = _request_bytes(url, body, headers)
    processes = max(1, min(processes, connections))
    shares = [connections // processes + (1 if i < connections % processes else 0) for i in range(processes)]
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    workers = [ctx.Process(target=_worker, args=(host, port, request, n, seconds, queue)) for n in shares]
    for w in workers:
        w.start()
    results = [queue.get() for _ in workers]
    for w in workers:
        w.join()
    latencies = [x for lats, _ in results for x in lats]
    errors = sum(e for _, e in results)
    return LoadResult(
        rps=len(latencies) / seconds,
        p50_ms=statistics.median(latencies) * 1e3 if latencies else float("nan"),
        requests=len(latencies),
        errors=errors,
    )
