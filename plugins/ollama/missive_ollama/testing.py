"""A fake Ollama server for tests (the driver's, and anyone's): Ollama's wire format, chunk by chunk.

Reproduces, from Ollama's ``api/types.go``, ``docs/api.md`` and
``server/routes.go``:

* ``GET /api/version`` (the replica health probe), ``GET /api/tags`` and
  ``POST /api/show`` (``model_info`` with ``<arch>.context_length``,
  ``capabilities``);
* ``POST /api/chat`` as ``application/x-ndjson`` with chunked transfer
  encoding, headers sent with the first line (gin writes them on the first
  flush); one ``{"model", "created_at", "message": {"role": "assistant",
  "content", "thinking"?, "tool_calls"?}, "done": false}`` object per token,
  tool calls whole in one chunk with ``arguments`` as an object, then the
  ``done: true`` line with ``done_reason``, durations, ``prompt_eval_count``
  (the whole prompt), ``prompt_eval_cached_count`` (its cached prefix, omitted
  when 0) and ``eval_count``;
* errors as ``{"error": "..."}``: the HTTP status before the first line, a
  line after it; Ollama's wordings (``model 'x' not found``, ``"x" does not
  support thinking``, ``the input length exceeds the context length`` with
  ``truncate: false``); ``messages: []`` answers ``done_reason: "load"``.

Default answer: the last user message's words, one per chunk, cut at
``num_predict`` (``done_reason: "length"``); a thinking model with ``think``
on first thinks ``"Let me think."``. A last user message ``FAKE:{json}``
plays a script instead (see :meth:`FakeOllama._script`).

Token counts: one token per whitespace-separated word of every content,
thinking, tool name, tool-call arguments and tools JSON, plus 4 per message.
The KV cache: the messages shared with the previous chat request (same model)
count as cached.
"""

from __future__ import annotations

import asyncio
import json
import threading
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

__all__ = ["FakeModel", "FakeOllama", "ChatRecord", "prompt_tokens"]


@dataclass
class FakeModel:
    capabilities: list[str] = field(default_factory=lambda: ["completion"])
    context_length: int = 40960
    arch: str = "qwen3"
    chat_missing: bool = False  # listed and shown, but /api/chat says not found (deleted meanwhile)


@dataclass
class ChatRecord:
    body: dict[str, Any]
    status: int = 200
    finished: bool = False
    disconnected: bool = False


def _words(text: Any) -> int:
    return len(str(text or "").split())


def prompt_tokens(body: dict[str, Any], messages: list[dict[str, Any]] | None = None) -> int:
    """The fake tokenizer's count for ``messages`` (default: the body's) and tools."""
    msgs = body.get("messages", []) if messages is None else messages
    total = 0
    for m in msgs:
        total += 4 + _words(m.get("content")) + _words(m.get("thinking")) + _words(m.get("tool_name"))
        for call in m.get("tool_calls") or []:
            total += _words(call["function"]["name"]) + _words(json.dumps(call["function"].get("arguments")))
    if messages is None and body.get("tools"):
        total += _words(json.dumps(body["tools"]))
    return total


class _Disconnected(Exception):
    pass


class FakeOllama:
    """Run with ``with FakeOllama(models) as fake: fake.url``; inspect ``fake.chats``."""

    def __init__(self, models: dict[str, FakeModel], *, port: int = 0) -> None:
        self.models = models
        self.requests: list[tuple[str, str]] = []
        self.chats: list[ChatRecord] = []
        self.gates: dict[str, threading.Event] = {}
        #: answer every /api/chat with Ollama's 503 "server busy" (its queue is full)
        self.busy = False
        self._previous: dict[str, list[dict[str, Any]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None
        #: the port to listen on (0: a free one), then the port listened on
        self.port = port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def gate(self, name: str) -> threading.Event:
        """An event a script step ``{"wait": name}`` blocks on until the test sets it."""
        return self.gates.setdefault(name, threading.Event())

    # -- lifecycle ----------------------------------------------------------

    def __enter__(self) -> FakeOllama:
        ready = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            self._server = loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", self.port))
            self.port = self._server.sockets[0].getsockname()[1]
            ready.set()
            loop.run_forever()
            self._server.close()
            loop.run_until_complete(self._server.wait_closed())
            loop.close()

        self._thread = threading.Thread(target=run, name="fake-ollama", daemon=True)
        self._thread.start()
        ready.wait(10)
        return self

    def __exit__(self, *exc: Any) -> None:
        for gate in self.gates.values():
            gate.set()
        assert self._loop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # -- HTTP ----------------------------------------------------------------

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                line = await reader.readline()
                if not line:
                    return
                method, path, _ = line.decode().split(" ", 2)
                headers: dict[str, str] = {}
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                    k, _, v = h.decode().partition(":")
                    headers[k.strip().lower()] = v.strip()
                raw = await reader.readexactly(int(headers.get("content-length", "0")))
                body = json.loads(raw) if raw else None
                self.requests.append((method, path))
                keep = await self._route(method, path, body, reader, writer)
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError, _Disconnected):
            return
        finally:
            writer.close()

    async def _json(self, writer: asyncio.StreamWriter, status: int, obj: Any) -> bool:
        data = json.dumps(obj).encode()
        reason = {
            200: "OK",
            400: "Bad Request",
            404: "Not Found",
            500: "Internal Server Error",
            503: "Service Unavailable",
        }
        writer.write(
            f"HTTP/1.1 {status} {reason.get(status, 'Error')}\r\nContent-Type: application/json; "
            "charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        return True

    async def _route(
        self, method: str, path: str, body: Any, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        if method == "GET" and path == "/api/version":
            return await self._json(writer, 200, {"version": "0.12.6"})
        if method == "GET" and path == "/api/tags":
            return await self._json(writer, 200, {"models": [self._listing(tag) for tag in self.models]})
        if method == "POST" and path == "/api/show":
            model = self.models.get(body.get("model", ""))
            if model is None:
                return await self._json(writer, 404, {"error": f"model '{body.get('model')}' not found"})
            return await self._json(writer, 200, self._show(body["model"], model))
        if method == "POST" and path == "/api/chat":
            return await self._chat(body, reader, writer)
        return await self._json(writer, 404, {"error": "404 page not found"})

    def _listing(self, tag: str) -> dict[str, Any]:
        return {
            "name": tag,
            "model": tag,
            "modified_at": "2025-06-01T10:00:00.000000000Z",
            "size": 5_200_000_000,
            "digest": "a" * 64,
            "details": {
                "format": "gguf",
                "family": self.models[tag].arch,
                "parameter_size": "8.2B",
                "quantization_level": "Q4_K_M",
            },
        }

    def _show(self, tag: str, model: FakeModel) -> dict[str, Any]:
        return {
            "modelfile": f"FROM {tag}\n",
            "parameters": 'temperature 0.6\nstop "<|im_end|>"',
            "template": "{{ .Prompt }}",
            "details": self._listing(tag)["details"],
            "model_info": {
                "general.architecture": model.arch,
                "general.parameter_count": 8_190_735_360,
                f"{model.arch}.context_length": model.context_length,
                f"{model.arch}.embedding_length": 4096,
            },
            "capabilities": model.capabilities,
            "modified_at": "2025-06-01T10:00:00.000000000Z",
        }

    # -- /api/chat -----------------------------------------------------------

    def _chunk(self, model: str, message: dict[str, Any]) -> dict[str, Any]:
        now = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        return {"model": model, "created_at": now, "message": {"role": "assistant", **message}, "done": False}

    async def _chat(
        self, body: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        record = ChatRecord(body=body)
        self.chats.append(record)
        tag = body.get("model", "")
        model = self.models.get(tag)

        def fail(status: int, message: str) -> Any:
            record.status = status
            return self._json(writer, status, {"error": message})

        if self.busy:
            return await fail(503, "server busy, please try again.  maximum pending requests exceeded")
        if model is None or model.chat_missing:
            return await fail(404, f"model '{tag}' not found")
        if not body.get("messages"):
            return await self._json(
                writer, 200, {**self._chunk(tag, {"content": ""}), "done_reason": "load", "done": True}
            )
        think = body.get("think")
        if think not in (None, True, False, "low", "medium", "high"):
            return await fail(400, "think must be a boolean or string (\"high\", \"medium\", \"low\")")
        if think and "thinking" not in model.capabilities:
            return await fail(400, f'"{tag}" does not support thinking')
        if isinstance(think, str) and model.arch != "gptoss":
            return await fail(400, f'think value "{think}" is not supported for this model')
        if body.get("tools") and "tools" not in model.capabilities:
            return await fail(400, f"registry.ollama.ai/library/{tag} does not support tools")
        options = body.get("options") or {}
        num_ctx = options.get("num_ctx", 4096)
        total = prompt_tokens(body)
        if total > num_ctx and body.get("truncate") is False:
            return await fail(400, "the input length exceeds the context length")
        previous = self._previous.get(tag, [])
        shared = 0
        for a, b in zip(previous, body["messages"], strict=False):
            if a != b:
                break
            shared += 1
        cached = min(prompt_tokens(body, body["messages"][:shared]), total - 1) if shared else 0
        self._previous[tag] = body["messages"]

        last = next((m for m in reversed(body["messages"]) if m.get("role") == "user"), {"content": ""})
        content = str(last.get("content") or "")
        script = json.loads(content[5:]) if content.startswith("FAKE:") else None
        return await self._play(record, writer, reader, tag, model, body, script, total, cached)

    async def _play(
        self,
        record: ChatRecord,
        writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
        tag: str,
        model: FakeModel,
        body: dict[str, Any],
        script: dict[str, Any] | None,
        total: int,
        cached: int,
    ) -> bool:
        """Stream the answer. A script ``{"steps": [...], "final": {...}}`` has steps:
        ``{"content"}``, ``{"thinking"}``, ``{"tool_calls": [...]}`` (a chunk each),
        ``{"sleep": s}``, ``{"wait": gate}``, ``{"status": n, "error": msg}`` (first
        step only: an HTTP error), ``{"error_line": msg}``, ``{"raw": text}``,
        ``{"close": true}`` (drop the connection), ``{"no_done": true}`` (end
        without the done line); ``final`` is merged into the done line."""
        num_predict = (body.get("options") or {}).get("num_predict", -1)
        started = False

        async def send(obj: Any, raw: str | None = None) -> None:
            nonlocal started
            data = (raw if raw is not None else json.dumps(obj)) + "\n"
            head = b""
            if not started:
                started = True
                head = (
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n"
                )
            payload = data.encode()
            writer.write(head + f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await writer.drain()

        async def pause(coro: Any) -> None:
            # Wait for coro while watching the connection: EOF means the client left.
            eof = asyncio.ensure_future(reader.read(1))
            work = asyncio.ensure_future(coro)
            done, _ = await asyncio.wait({eof, work}, return_when=asyncio.FIRST_COMPLETED)
            if eof in done:
                work.cancel()
                record.disconnected = True
                raise _Disconnected
            eof.cancel()

        steps: list[dict[str, Any]]
        if script is None:
            steps = []
            if body.get("think") and "thinking" in model.capabilities:
                steps += [
                    {"thinking": w if i == 0 else " " + w} for i, w in enumerate("Let me think.".split())
                ]
            last = next((m for m in reversed(body["messages"]) if m.get("role") == "user"), {})
            words = str(last.get("content") or "ok").split() or ["ok"]
            steps += [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
            final: dict[str, Any] = {}
        else:
            steps = script.get("steps", [])
            final = script.get("final", {})
        emitted = 0
        reason = "stop"
        try:
            for step in steps:
                if "status" in step:
                    record.status = step["status"]
                    await self._json(writer, step["status"], {"error": step["error"]})
                    return True
                if "sleep" in step:
                    await pause(asyncio.sleep(step["sleep"]))
                elif "wait" in step:
                    gate = self.gate(step["wait"])
                    await pause(asyncio.get_running_loop().run_in_executor(None, gate.wait, 60))
                    if not gate.is_set():
                        await send({"error": f"fake: gate {step['wait']!r} was never opened"})
                        writer.write(b"0\r\n\r\n")
                        await writer.drain()
                        return True
                elif "error_line" in step:
                    await send({"error": step["error_line"]})
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                elif "raw" in step:
                    await send(None, raw=step["raw"])
                elif "close" in step:
                    return False
                elif "no_done" in step:
                    writer.write(b"0\r\n\r\n")
                    await writer.drain()
                    return True
                else:
                    if 0 < num_predict <= emitted:
                        reason = "length"
                        break
                    message = {"content": step.get("content", "")}
                    message.update({k: step[k] for k in ("thinking", "tool_calls") if k in step})
                    await send(self._chunk(tag, message))
                    emitted += 1
            done = {
                **self._chunk(tag, {"content": ""}),
                "done_reason": reason,
                "done": True,
                "total_duration": 2_500_000_000,
                "load_duration": 40_000_000,
                "prompt_eval_count": total,
                "prompt_eval_duration": 300_000_000,
                "eval_count": emitted,
                "eval_duration": 2_100_000_000,
            }
            if cached:
                done["prompt_eval_cached_count"] = cached
            done.update(final)
            await send(done)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            record.finished = True
            return True
        except (ConnectionError, _Disconnected):
            record.disconnected = True
            raise _Disconnected from None
