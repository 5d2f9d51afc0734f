"""The toy backend: the bigram chain of :mod:`missive_markov.chain` served
over HTTP by a process of its own, as a real model server would be::

    markov-backend --port 8700 [--corpus FILE] [--context 512] [--parallel 4] [--delay 0]

(``--port 0``: a free port; the first line printed is ``markov backend
listening on http://HOST:PORT``). Bodies are JSON; an error is
``{"error": {"type": ..., "message": ...}}`` with a 4xx or 5xx status.

* ``GET /health``: ``{"status": "ok", "context_window": N, "vocabulary": V}``;
* ``POST /tokenize`` ``{"text"}``: ``{"tokens": n}`` (whitespace-separated words);
* ``POST /generate`` ``{"prompt", "max_tokens", "temperature": 1.0, "top_k":
  null, "seed": null}``: an NDJSON stream (HTTP/1.0, ended by closing the
  connection) of ``{"token": "word"}`` lines, then ``{"done": true,
  "stop_reason": "end" | "length", "prompt_tokens": n, "output_tokens": m}``.
  A prompt leaving no room for one token in ``--context`` is a 400
  ``context_overflow`` (with ``prompt_tokens`` and ``context_window``); a
  bad body a 400 ``invalid_request``; a request beyond ``--parallel``
  generations at once a 503 ``busy``. A client that goes away stops its
  generation (the next write fails).

The standard library's threading HTTP server is enough for a toy: one
thread per connection, no dependencies.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib.resources import files
from pathlib import Path
from typing import Any

from .chain import BigramChain, tokens

__all__ = ["BackendError", "make_server", "main"]


class BackendError(Exception):
    """An error answer: HTTP ``status``, ``{"error": {"type": kind, "message": ...}}`` plus ``extra``."""

    def __init__(self, status: int, kind: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.body = status, {"error": {"type": kind, "message": message, **extra}}


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        if self.server.verbose:
            super().log_message(format, *args)

    def _send_json(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict[str, Any]:
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"null")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            raise BackendError(400, "invalid_request", "the body must be a JSON object")
        return body

    def do_GET(self) -> None:
        if self.path != "/health":
            return self._send_json(404, {"error": {"type": "not_found", "message": self.path}})
        chain = self.server.chain
        self._send_json(
            200, {"status": "ok", "context_window": self.server.context, "vocabulary": chain.vocabulary}
        )

    def do_POST(self) -> None:
        try:
            if self.path == "/tokenize":
                text = self._body().get("text")
                if not isinstance(text, str):
                    raise BackendError(400, "invalid_request", "text must be a string")
                return self._send_json(200, {"tokens": len(tokens(text))})
            if self.path == "/generate":
                return self._generate(self._body())
            raise BackendError(404, "not_found", self.path)
        except BackendError as exc:
            self._send_json(exc.status, exc.body)

    def _generate(self, body: dict[str, Any]) -> None:
        prompt, max_tokens = body.get("prompt"), body.get("max_tokens")
        temperature, top_k, seed = body.get("temperature", 1.0), body.get("top_k"), body.get("seed")
        if not isinstance(prompt, str) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise BackendError(
                400, "invalid_request", "prompt must be a string and max_tokens an integer >= 1"
            )
        if not isinstance(temperature, (int, float)) or temperature < 0:
            raise BackendError(400, "invalid_request", "temperature must be a number >= 0")
        if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
            raise BackendError(400, "invalid_request", "top_k must be an integer >= 1")
        prompt_tokens = len(tokens(prompt))
        context = self.server.context
        if prompt_tokens >= context:
            raise BackendError(
                400,
                "context_overflow",
                f"the prompt has {prompt_tokens} tokens, the context holds {context}",
                prompt_tokens=prompt_tokens,
                context_window=context,
            )
        if not self.server.slots.acquire(blocking=False):
            raise BackendError(503, "busy", f"all {self.server.parallel} generation slots are in use")
        try:
            self.send_response(200)
            self.send_header("content-type", "application/x-ndjson")
            self.end_headers()
            budget = min(max_tokens, context - prompt_tokens)
            rng = random.Random(seed)
            words = self.server.chain.generate(prompt, budget, temperature=temperature, top_k=top_k, rng=rng)
            count = 0
            for word in words:
                self._line({"token": word})
                count += 1
                time.sleep(self.server.delay)
            reason = "length" if count == budget else "end"
            self._line(
                {"done": True, "stop_reason": reason, "prompt_tokens": prompt_tokens, "output_tokens": count}
            )
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away: stop generating
        finally:
            self.server.slots.release()

    def _line(self, obj: dict[str, Any]) -> None:
        self.wfile.write(json.dumps(obj).encode() + b"\n")
        self.wfile.flush()


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        chain: BigramChain,
        *,
        context: int,
        parallel: int,
        delay: float,
        verbose: bool,
    ) -> None:
        super().__init__(address, _Handler)
        self.chain, self.context, self.parallel, self.delay, self.verbose = (
            chain,
            context,
            parallel,
            delay,
            verbose,
        )
        self.slots = threading.BoundedSemaphore(parallel)


def make_server(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    corpus: str | None = None,
    context: int = 512,
    parallel: int = 4,
    delay: float = 0.0,
    verbose: bool = False,
) -> ThreadingHTTPServer:
    """The backend's HTTP server, bound (``port`` 0: a free one) but not yet
    serving; ``corpus`` is the text (default: the packaged ``corpus.txt``).

    Raises: ValueError for a corpus without words; OSError if the address is taken.
    """
    text = corpus if corpus is not None else files("missive_markov").joinpath("corpus.txt").read_text()
    return _Server(
        (host, port), BigramChain(text), context=context, parallel=parallel, delay=delay, verbose=verbose
    )


def main(argv: list[str] | None = None) -> None:
    """``markov-backend``: serve until interrupted (SIGINT, SIGTERM ends the process)."""
    parser = argparse.ArgumentParser(prog="markov-backend", description="A toy bigram text model over HTTP.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8700, help="0: a free port (printed)")
    parser.add_argument(
        "--corpus", type=Path, help="a text file, one sentence per line (default: the packaged one)"
    )
    parser.add_argument("--context", type=int, default=512, help="tokens of context (prompt + answer)")
    parser.add_argument("--parallel", type=int, default=4, help="generations at once; more get a 503")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds between tokens")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    args = parser.parse_args(argv)
    corpus = args.corpus.read_text() if args.corpus else None
    server = make_server(
        args.host,
        args.port,
        corpus=corpus,
        context=args.context,
        parallel=args.parallel,
        delay=args.delay,
        verbose=args.verbose,
    )
    host, port = server.server_address[:2]
    print(f"markov backend listening on http://{host}:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
