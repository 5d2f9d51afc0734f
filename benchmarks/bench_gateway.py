"""The gateway path: Missive in front of an instant OpenAI-compatible backend (issue 19).

Starts, on this machine:

* the instant backend (``instant_backend.py``): a raw asyncio HTTP/1.1
  server in its own process that answers ``/v1/chat/completions`` from
  memory, a JSON completion or a 16-chunk SSE stream with usage;
* ``missive serve`` with one ``driver = "openai"`` model pointed at it, once
  per ``--workers`` value (``1,2``: one server with 1 worker, then one with
  2; a value above 1 sets ``server.workers``);
* the LiteLLM proxy with a ``hosted_vllm`` route to the same backend, when
  ``litellm`` is on ``PATH`` (a benchmark-only tool, never a test
  dependency; ``--skip-litellm`` leaves it out); its ``/v1/messages``.

Each is loaded in turn by the load generator (``loadgen.py``: wrk when on
``PATH``, else Python processes; the table says which) with the same body
(``max_tokens`` 64, a one-line prompt), non-streaming and streaming, at 1
connection (latency median) and at ``--connections`` (64; requests per
second), for ``--seconds`` each, after one warm-up run. The backend alone
is measured first with its own equivalent bodies: its figures are what the
generator can drive here, and the ratios and the "added" latency are against
it, in the same run. For each server also: CPU time it used per request
during the loaded runs (its processes together; less sensitive to other work
on the machine than requests/s), and its resident memory after the warm-up
and after all the runs (targets: ``after <= 1.2 x before``).

Every answer is checked once before the load (the backend's 16 words, whole,
``stop_reason`` ``end_turn``); failed requests under load are counted.

    python benchmarks/bench_gateway.py [--seconds 10] [--workers 1,2] [--connections 64]
        [--python-loadgen] [--skip-litellm] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from instant_backend import WORDS, answer_text  # noqa: E402
from loadgen import LoadResult, generator_name, run_load  # noqa: E402

from missive.testing import free_port, serve_process  # noqa: E402

HERE = Path(__file__).resolve().parent
PROMPT = "Say hello in a few words."
MAX_TOKENS = 64
#: Resident memory after the load may be this much above before.
RSS_GROWTH = 0.20
TARGETS = {"non_stream_rps": 600.0, "stream_rps": 300.0, "added_p50_ms": 2.0}


@dataclass
class Row:
    """One server's measurements (``load`` keyed by ``"stream|non-stream"`` x connections)."""

    name: str
    load: dict[str, LoadResult] = field(default_factory=dict)
    cpu_ms_per_request: float | None = None
    rss_before_mib: float | None = None
    rss_after_mib: float | None = None
    note: str = ""


# -- processes ----------------------------------------------------------------


def _wait_http(url: str, proc: subprocess.Popen[bytes] | None, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code < 500:
                return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


@contextlib.contextmanager
def instant_backend() -> Iterator[str]:
    """The instant backend in its own process; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(HERE / "instant_backend.py"), "--port", str(port)])
    try:
        url = f"http://127.0.0.1:{port}"
        _wait_http(f"{url}/health", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def litellm_proxy(binary: str, backend: str) -> Iterator[tuple[str, dict[str, str], int]]:
    """The LiteLLM proxy (``binary``) with a ``hosted_vllm`` route to the
    backend; yields its URL, the headers its requests need and its process id (its master
    key, which it requires; its model cost map is read locally: no network)."""
    port = free_port()
    key = "sk-bench-" + secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="bench-litellm-") as tmp:
        config = Path(tmp) / "litellm.yaml"
        config.write_text(
            "model_list:\n  - model_name: gw\n    litellm_params:\n"
            f"      model: hosted_vllm/instant\n      api_base: {backend}/v1\n      api_key: none\n"
        )
        log = open(Path(tmp) / "litellm.log", "wb")
        env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        proc = subprocess.Popen(
            [binary, "--config", str(config), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_http(f"{url}/health/liveliness", proc, timeout=180)
            yield url, {**MESSAGES_HEADERS, "authorization": f"Bearer {key}"}, proc.pid
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
            log.close()


def process_tree(pid: int) -> list[int]:
    """``pid`` and its descendants (Linux ``/proc``)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        tree.append(current)
        todo += children.get(current, [])
    return tree


def rss_mib(pids: list[int]) -> float:
    """Resident memory of ``pids`` together, MiB."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def cpu_seconds(pids: list[int]) -> float:
    """User plus system CPU seconds used by ``pids`` so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / ticks


# -- requests -------------------------------------------------------------------


def messages_body(stream: bool, model: str = "gw") -> bytes:
    return json.dumps(
        {
            "model": model,
            "max_tokens": MAX_TOKENS,
            "stream": stream,
            "messages": [{"role": "user", "content": PROMPT}],
        }
    ).encode()


def chat_body(stream: bool) -> bytes:
    body = {
        "model": "instant",
        "max_tokens": MAX_TOKENS,
        "stream": stream,
        "messages": [{"role": "user", "content": PROMPT}],
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body).encode()


MESSAGES_HEADERS = {
    "content-type": "application/json",
    "anthropic-version": "2023-06-01",
    "x-api-key": "bench",
}
CHAT_HEADERS = {"content-type": "application/json"}


def check_messages(url: str, headers: dict[str, str] | None = None) -> None:
    """One non-streaming and one streaming answer, checked whole.

    Raises:
        RuntimeError: an answer is not the backend's text ending ``end_turn``.
    """
    expected = answer_text()
    headers = headers or MESSAGES_HEADERS
    answer = httpx.post(f"{url}/v1/messages", content=messages_body(False), headers=headers, timeout=30)
    data = answer.json()
    text = "".join(b.get("text", "") for b in data.get("content", []))
    if answer.status_code != 200 or text != expected or data.get("stop_reason") != "end_turn":
        raise RuntimeError(f"{url}: unexpected answer {answer.status_code} {answer.text[:300]}")
    streamed = httpx.post(f"{url}/v1/messages", content=messages_body(True), headers=headers, timeout=30)
    deltas, stop = [], None
    for line in streamed.text.splitlines():
        if line.startswith("data:"):
            event = json.loads(line[5:])
            if event.get("type") == "content_block_delta":
                deltas.append(event["delta"].get("text", ""))
            elif event.get("type") == "message_delta":
                stop = event["delta"]["stop_reason"]
    if streamed.status_code != 200 or "".join(deltas) != expected or stop != "end_turn":
        raise RuntimeError(f"{url}: unexpected stream {streamed.status_code} {streamed.text[:300]}")


def check_backend(url: str) -> None:
    data = httpx.post(f"{url}/v1/chat/completions", content=chat_body(False), headers=CHAT_HEADERS).json()
    if data["choices"][0]["message"]["content"] != answer_text():
        raise RuntimeError("the instant backend answers wrongly")


# -- measuring --------------------------------------------------------------------


def measure(
    name: str,
    url: str,
    bodies: dict[bool, bytes],
    headers: dict[str, str],
    args: argparse.Namespace,
    pid: int | None = None,
) -> Row:
    """Warm up, then the four runs; CPU and memory of ``pid``'s processes."""
    row = Row(name)
    load = lambda stream, conns, secs: run_load(  # noqa: E731
        url, bodies[stream], headers, connections=conns, seconds=secs, force_python=args.python_loadgen
    )
    load(True, args.connections, min(3.0, args.seconds))  # warm-up: connections, buffers, first-use imports
    pids = process_tree(pid) if pid is not None else []
    if pids:
        row.rss_before_mib = rss_mib(pids)
    served, cpu = 0, 0.0
    for stream in (False, True):
        row.load[f"{'stream' if stream else 'non-stream'}|1"] = load(stream, 1, args.seconds)
    for stream in (False, True):
        before = cpu_seconds(pids) if pids else 0.0
        result = load(stream, args.connections, args.seconds)
        if pids:
            cpu += cpu_seconds(pids) - before
        served += result.requests
        row.load[f"{'stream' if stream else 'non-stream'}|{args.connections}"] = result
    if pids:
        time.sleep(1.0)
        row.rss_after_mib = rss_mib(process_tree(pid))  # type: ignore[arg-type]
        row.cpu_ms_per_request = cpu / served * 1e3 if served else None
    return row


def fmt_row(row: Row, base: Row, conns: int) -> list[str]:
    cells = [row.name]
    for stream in (False, True):
        r, b = (
            row.load[f"{'stream' if stream else 'non-stream'}|{conns}"],
            base.load[f"{'stream' if stream else 'non-stream'}|{conns}"],
        )
        ratio = "" if row is base else f" ({r.rps / b.rps:.3f}x)"
        errors = f", {r.errors} errors" if r.errors else ""
        cells.append(f"{r.rps:,.0f}{ratio}{errors}")
    for stream in (False, True):
        r, b = (
            row.load[f"{'stream' if stream else 'non-stream'}|1"],
            base.load[f"{'stream' if stream else 'non-stream'}|1"],
        )
        added = "" if row is base else f" (+{r.p50_ms - b.p50_ms:.2f})"
        cells.append(f"{r.p50_ms:.2f}{added}")
    cells.append("" if row.cpu_ms_per_request is None else f"{row.cpu_ms_per_request:.2f}")
    if row.rss_before_mib is not None and row.rss_after_mib is not None:
        cells.append(
            f"{row.rss_before_mib:.0f} -> {row.rss_after_mib:.0f} "
            f"({row.rss_after_mib / row.rss_before_mib - 1:+.0%})"
        )
    else:
        cells.append("")
    return cells


def print_table(rows: list[Row], args: argparse.Namespace, notes: list[str]) -> None:
    conns = args.connections
    header = [
        "",
        f"non-stream req/s, {conns} conn",
        f"stream req/s, {conns} conn",
        "p50 ms 1 conn non-stream",
        "p50 ms 1 conn stream",
        "CPU ms/request",
        "RSS MiB before -> after",
    ]
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(fmt_row(row, rows[0], conns)) + " |")
    print()
    for note in notes:
        print(note)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="each run (default 10)")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--workers", default="1", help="comma-separated server.workers values (default 1)")
    parser.add_argument(
        "--python-loadgen", action="store_true", help="use the Python generator even if wrk is here"
    )
    parser.add_argument("--skip-litellm", action="store_true")
    parser.add_argument("--litellm", help="the litellm executable (default: `litellm` on PATH)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        help="extra missive config override KEY=VALUE for every Missive run (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="also print the rows as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    notes = [
        f"load generator: {generator_name(args.python_loadgen)}; machine: {os.cpu_count()} CPUs, load "
        f"average {' '.join(f'{x:.2f}' for x in os.getloadavg())} at the start"
    ]
    rows: list[Row] = []
    with instant_backend() as backend:
        check_backend(backend)
        rows.append(
            measure(
                "instant backend alone",
                f"{backend}/v1/chat/completions",
                {False: chat_body(False), True: chat_body(True)},
                CHAT_HEADERS,
                args,
            )
        )
        for workers in [int(w) for w in args.workers.split(",")]:
            config = {
                "models": {"gw": {"driver": "openai", "settings": {"base_url": backend, "model": "instant"}}}
            }
            extra = [f"--set={o}" for o in args.overrides]
            if workers > 1:
                extra.append(f"--set=server.workers={workers}")
            with serve_process(config, args=tuple(extra)) as server:
                check_messages(server.url)
                label = f"Missive openai driver, {workers} worker{'s' if workers > 1 else ''}"
                rows.append(
                    measure(
                        label,
                        f"{server.url}/v1/messages",
                        {False: messages_body(False), True: messages_body(True)},
                        MESSAGES_HEADERS,
                        args,
                        pid=server.process.pid,
                    )
                )
        litellm = args.litellm or shutil.which("litellm")
        if args.skip_litellm:
            notes.append("LiteLLM: skipped (--skip-litellm)")
        elif litellm is None:
            notes.append(
                "LiteLLM: not installed (pip install 'litellm[proxy]' puts `litellm` on PATH, or pass "
                "--litellm PATH); skipped"
            )
        else:
            try:
                with litellm_proxy(litellm, backend) as (url, headers, pid):
                    check_messages(url, headers)
                    rows.append(
                        measure(
                            "LiteLLM proxy /v1/messages (hosted_vllm)",
                            f"{url}/v1/messages",
                            {False: messages_body(False), True: messages_body(True)},
                            headers,
                            args,
                            pid=pid,
                        )
                    )
            except Exception as exc:  # a benchmark-only extra: report, do not fail the run
                notes.append(f"LiteLLM: failed to run ({exc})")
    notes.append(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    notes.append(
        f"targets (issue 19): >= {TARGETS['non_stream_rps']:.0f} non-stream and >= "
        f"{TARGETS['stream_rps']:.0f} stream req/s at {args.connections} connections, p50 added at 1 "
        f"connection <= {TARGETS['added_p50_ms']:g} ms, RSS after <= {1 + RSS_GROWTH:.1f}x before"
    )
    notes.append(
        f"the backend streams {WORDS} chunks; ratios (x) are against the backend alone, "
        "added latency (+ms) over its p50"
    )
    print_table(rows, args, notes)
    if args.json:
        print(json.dumps([asdict(r) for r in rows], indent=1))


if __name__ == "__main__":
    main()
