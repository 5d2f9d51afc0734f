"""An instant OpenAI-compatible backend for gateway benchmarks: answers from memory.

A raw ``asyncio.Protocol`` HTTP/1.1 server (keep-alive, pipelining-safe),
so that it costs far less per request than the gateway in front of it and is
never the bottleneck (``bench_gateway.py`` measures it alone, in the same
run). Every answer is prepared once, as bytes:

* ``POST /v1/chat/completions`` with ``"stream": false``: one
  ``chat.completion`` whose content is :data:`WORDS` chunks of text and whose
  ``usage`` counts them;
* the same with ``"stream": true``: an SSE stream in vLLM's shape (a role
  chunk, one chunk per word, a ``finish_reason: "stop"`` chunk, a
  ``choices: []`` usage chunk, ``data: [DONE]``), each event one HTTP chunk
  of a ``Transfer-Encoding: chunked`` body, written in one ``write``;
* ``GET /v1/models`` and ``GET /health`` (the gateway's start-up and health
  probes); anything else is a 404.

Run on its own: ``python benchmarks/instant_backend.py --port 8700``
(uses uvloop when it is importable). The request body is not parsed as JSON:
``"stream":true`` (with or without a space) anywhere in it selects the stream.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os

__all__ = ["WORDS", "answer_text", "serve", "main"]

#: Content chunks of every answer (the issue's "16 chunks").
WORDS = 16
MODEL = "instant"


def answer_text(words: int = WORDS) -> str:
    """The answer's text: ``words`` words, each one chunk of the stream."""
    return "".join(f" w{i}" for i in range(words)).lstrip()


def _pieces(words: int) -> list[str]:
    text = answer_text(words).split(" ")
    return [text[0]] + [" " + w for w in text[1:]]


def _usage(words: int) -> dict[str, int]:
    return {"prompt_tokens": 12, "completion_tokens": words, "total_tokens": 12 + words}


def _response(status: str, content_type: str, body: bytes) -> bytes:
    return (
        f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n"
        "connection: keep-alive\r\n\r\n"
    ).encode() + body


def _completion(words: int) -> bytes:
    body = {
        "id": "chatcmpl-instant",
        "object": "chat.completion",
        "created": 1,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer_text(words)},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(words),
    }
    return _response("200 OK", "application/json", json.dumps(body).encode())


def _stream(words: int) -> bytes:
    def chunk(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
        return {
            "id": "chatcmpl-instant",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in _pieces(words)]
    events.append(chunk({"content": ""}, "stop"))
    events.append(
        {
            "id": "chatcmpl-instant",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [],
            "usage": _usage(words),
        }
    )
    datas = [f"data: {json.dumps(e, separators=(',', ':'))}\n\n".encode() for e in events] + [
        b"data: [DONE]\n\n"
    ]
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"transfer-encoding: chunked\r\nconnection: keep-alive\r\n\r\n"
    )
    return head + b"".join(b"%x\r\n%s\r\n" % (len(d), d) for d in datas) + b"0\r\n\r\n"


class _Answers:
    def __init__(self, words: int) -> None:
        self.completion = _completion(words)
        self.stream = _stream(words)
        self.models = _response(
            "200 OK",
            "application/json",
            json.dumps(
                {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "bench"}]}
            ).encode(),
        )
        self.health = _response("200 OK", "text/plain", b"ok")
        self.not_found = _response("404 Not Found", "application/json", b'{"error":{"message":"not found"}}')


class _Connection(asyncio.Protocol):
    def __init__(self, answers: _Answers) -> None:
        self.answers = answers
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        out = []
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = self.buffer[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                stop = head.find(b"\r\n", at)
                length = int(head[at + 15 : stop if stop >= 0 else None])
            total = end + 4 + length
            if len(self.buffer) < total:
                break
            body = self.buffer[end + 4 : total]
            self.buffer = self.buffer[total:]
            line = head[: head.find(b"\r\n")]
            if line.startswith(b"post /v1/chat/completions"):
                streamed = b'"stream":true' in body or b'"stream": true' in body
                out.append(self.answers.stream if streamed else self.answers.completion)
            elif line.startswith(b"get /v1/models"):
                out.append(self.answers.models)
            elif line.startswith(b"get /health"):
                out.append(self.answers.health)
            else:
                out.append(self.answers.not_found)
        if out and self.transport is not None:
            self.transport.write(b"".join(out))


async def serve(host: str, port: int, words: int = WORDS) -> None:
    """Serve until cancelled."""
    answers = _Answers(words)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: _Connection(answers), host, port, backlog=1024, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--words", type=int, default=WORDS)
    args = parser.parse_args()
    runner = asyncio.run
    if os.environ.get("INSTANT_BACKEND_LOOP", "uvloop") == "uvloop":
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(args.host, args.port, args.words))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
