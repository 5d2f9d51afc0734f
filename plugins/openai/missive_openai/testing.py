"""A fake OpenAI-compatible server reproducing vLLM's wire format, for tests.

:class:`FakeChatServer` runs a small HTTP/1.1 server in a thread on a free
loopback port. It answers like vLLM's OpenAI server
(``vllm/entrypoints/openai/serving_chat.py``, ``protocol.py``,
``api_server.py``), chunk by chunk:

* ``POST /v1/chat/completions`` with ``stream: true``: a first chunk
  ``delta: {role: "assistant", content: ""}``; one chunk per token of
  ``content`` or ``reasoning_content``; tool calls as vLLM's Hermes parser
  streams them (a first fragment with ``id``, ``type``, ``index`` and
  ``function: {name, arguments: ""}``, then ``{index, function: {arguments}}``
  fragments); a natural stop as an empty ``content`` delta (the EOS token's
  text) with ``finish_reason: "stop"``, a cut as the last token's delta with
  ``finish_reason: "length"``; with ``stream_options.include_usage`` a
  ``choices: []`` usage chunk (``prompt_tokens_details.cached_tokens`` only
  with ``prompt_tokens_details=True``, as ``--enable-prompt-tokens-details``);
  then ``data: [DONE]``. ``completion_tokens`` counts the EOS token, as vLLM.
* errors in vLLM's shape: ``{"error": {"message", "type": "BadRequestError",
  "param": null, "code": 400}}`` (vLLM >= 0.10) or, with
  ``error_shape="object"``, ``{"object": "error", "message", "type", "param",
  "code"}`` (vLLM < 0.10); the context-length wordings of vLLM >= 0.10; the
  ``"auto" tool choice requires --enable-auto-tool-choice ...`` 400 when
  ``auto_tools=False``; 401 ``{"error": "Unauthorized"}`` with ``api_key``;
* ``GET /v1/models`` (with ``max_model_len`` when ``vllm=True``),
  ``GET /health``, and with ``vllm=True`` ``POST /tokenize`` (``count``,
  ``max_model_len``, ``tokens``). ``vllm=False`` is a generic server: no
  ``/tokenize``, no ``max_model_len``.

The "model" is deterministic. Its tokenizer splits the rendered chat (role
markers, contents, tool calls, tools, generation prompt) on whitespace, so
``/tokenize`` and the usage agree. It answers with the words of the last user
message, or plays a script: a user message whose text is
``{"script": [steps], "finish_reason": ..., "usage": true}`` with steps

    {"content": "Hel"}                 one content chunk (1 token, or "tokens": n)
    {"reasoning": "hmm"}               one reasoning chunk ("field": "reasoning" for the newer name)
    {"tool_call": {"name": "f", "arguments": ["{\\"a\\"", ": 1}"]}}
                                       first fragment (id, name, arguments ""), then one per fragment
    {"raw": "data: {oops"}             a raw line (malformed output)
    {"error": "message"}               an error chunk, then [DONE]
    {"drop": true}                     close the connection mid-stream
    {"sleep": 0.1}                     pause

Everything received is recorded: :attr:`requests` (bodies of chat
completions), :attr:`tokenize_requests`, :attr:`headers`, :attr:`disconnects`
(streams the client closed before the end) and :attr:`completed`.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from missive.testing import start_http_server, stop_http_server

__all__ = ["FakeChatServer", "render_tokens", "BLOCK_SIZE"]

#: vLLM's KV-cache block size: prefix-cache hits are whole blocks.
BLOCK_SIZE = 16
IMAGE_TOKENS = 16


def _words(text: str) -> list[str]:
    return text.split()


def _content_tokens(content: Any) -> list[str]:
    if isinstance(content, str):
        return _words(content)
    tokens: list[str] = []
    for part in content or []:
        if part.get("type") == "text":
            tokens += _words(part.get("text", ""))
        elif part.get("type") == "image_url":
            tokens += ["<|image|>"] * IMAGE_TOKENS
    return tokens


def render_tokens(body: dict[str, Any]) -> list[str]:
    """The fake chat template + tokenizer: the prompt's tokens for a chat
    completions or tokenize body (``messages``, ``tools``,
    ``add_generation_prompt``, ``continue_final_message``)."""
    tokens: list[str] = []
    if body.get("tools"):
        tokens += ["<|tools|>", *_words(json.dumps(body["tools"], sort_keys=True))]
    messages = body.get("messages", [])
    for i, message in enumerate(messages):
        tokens.append(f"<|{message['role']}|>")
        tokens += _content_tokens(message.get("content"))
        for call in message.get("tool_calls") or []:
            tokens += ["<|call|>", call["function"]["name"], *_words(call["function"]["arguments"])]
        if message.get("tool_call_id"):
            tokens.append(message["tool_call_id"])
        last = i == len(messages) - 1
        if not (last and body.get("continue_final_message")):
            tokens.append("<|end|>")
    if body.get("add_generation_prompt", True) and not body.get("continue_final_message"):
        tokens.append("<|assistant|>")
    kwargs = body.get("chat_template_kwargs") or {}
    if kwargs.get("enable_thinking") is False:
        tokens.append("<|no_think|>")
    return tokens


def _token_id(token: str) -> int:
    return zlib.crc32(token.encode()) % 50000


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, str):
                return content
            return "\n".join(p.get("text", "") for p in content or [] if p.get("type") == "text")
    return ""


class _Disconnected(Exception):
    pass


class FakeChatServer:
    """See the module doc. Use as a context manager; :attr:`url` is the base URL.

    Args:
        model: the served model name (others get vLLM's 404).
        max_model_len: the context length.
        vllm: serve vLLM's extras (``/tokenize``, ``max_model_len`` in ``/v1/models``).
        prompt_tokens_details: report cached prefix tokens (vLLM's
            ``--enable-prompt-tokens-details``).
        auto_tools: ``tool_choice: "auto"`` allowed (``--enable-auto-tool-choice``).
        api_key: require ``Authorization: Bearer <api_key>``.
        error_shape: ``"nested"`` (vLLM >= 0.10) or ``"object"`` (vLLM < 0.10).
        port: the port to listen on (0: a free one).
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        max_model_len: int = 2048,
        vllm: bool = True,
        prompt_tokens_details: bool = False,
        auto_tools: bool = True,
        api_key: str | None = None,
        error_shape: str = "nested",
        port: int = 0,
    ) -> None:
        self.port = port
        self.model = model
        self.max_model_len = max_model_len
        self.vllm = vllm
        self.prompt_tokens_details = prompt_tokens_details
        self.auto_tools = auto_tools
        self.api_key = api_key
        self.error_shape = error_shape
        #: status for every chat completion (e.g. 503), None to answer normally
        self.fail_status: int | None = None
        self.health_status = 200
        self.requests: list[dict[str, Any]] = []
        self.tokenize_requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.disconnects: list[str] = []
        self.completed: list[str] = []
        self._cache: list[str] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self.url = ""

    # -- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> FakeChatServer:
        fake = self

        class Handler(_Handler):
            server_fake = fake

        self._server, self.url = start_http_server(Handler, port=self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        stop_http_server(self._server)

    def wait_for(self, condition: Any, timeout: float = 10.0) -> bool:
        """Poll ``condition()`` until true or ``timeout`` seconds pass."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                return True
            time.sleep(0.02)
        return bool(condition())

    # -- helpers ------------------------------------------------------------------

    def error_body(self, message: str, status: int, kind: str = "BadRequestError") -> dict[str, Any]:
        error = {"message": message, "type": kind, "param": None, "code": status}
        if self.error_shape == "object":
            return {"object": "error", **error}
        return {"error": error}

    def cached_tokens(self, tokens: list[str]) -> int:
        """Prefix-cache hit against the previous prompt, in whole blocks, at
        least one token recomputed (as vLLM)."""
        with self._lock:
            common = 0
            for a, b in zip(self._cache, tokens, strict=False):
                if a != b:
                    break
                common += 1
            self._cache = list(tokens)
        common = min(common, len(tokens) - 1)
        return (common // BLOCK_SIZE) * BLOCK_SIZE


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_fake: FakeChatServer

    def log_message(self, *args: object) -> None:
        pass

    # -- plumbing -----------------------------------------------------------------

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_body(self) -> Any:
        length = int(self.headers.get("content-length", "0"))
        return json.loads(self.rfile.read(length) or b"{}")

    def _authorized(self) -> bool:
        fake = self.server_fake
        if fake.api_key and self.headers.get("authorization") != f"Bearer {fake.api_key}":
            self._json(401, {"error": "Unauthorized"})
            return False
        return True

    def _chunk(self, data: bytes) -> None:
        try:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, OSError) as exc:
            raise _Disconnected() from exc

    def _event(self, payload: Any) -> None:
        self._chunk(f"data: {json.dumps(payload)}\n\n".encode())

    # -- routes ---------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        fake = self.server_fake
        if self.path == "/health":
            self.send_response(fake.health_status)
            self.send_header("content-length", "0")
            self.end_headers()
        elif self.path == "/v1/models":
            if not self._authorized():
                return
            card: dict[str, Any] = {
                "id": fake.model,
                "object": "model",
                "created": 1700000000,
                "owned_by": "vllm",
                "root": fake.model,
                "parent": None,
            }
            if fake.vllm:
                card["max_model_len"] = fake.max_model_len
            self._json(200, {"object": "list", "data": [card]})
        else:
            self._json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802
        fake = self.server_fake
        body = self._read_body()
        if self.path == "/tokenize" and fake.vllm:
            if not self._authorized():
                return
            fake.tokenize_requests.append(body)
            tokens = render_tokens(body)
            self._json(
                200,
                {
                    "count": len(tokens),
                    "max_model_len": fake.max_model_len,
                    "tokens": [_token_id(t) for t in tokens],
                },
            )
        elif self.path == "/v1/chat/completions":
            fake.headers.append({k.lower(): v for k, v in self.headers.items()})
            if not self._authorized():
                return
            fake.requests.append(body)
            self._chat(body)
        else:
            self._json(404, {"detail": "Not Found"})

    def _chat(self, body: dict[str, Any]) -> None:
        fake = self.server_fake
        if fake.fail_status is not None:
            self._json(
                fake.fail_status,
                fake.error_body("engine unavailable", fake.fail_status, "InternalServerError"),
            )
            return
        if body.get("model") != fake.model:
            self._json(
                404, fake.error_body(f"The model `{body.get('model')}` does not exist.", 404, "NotFoundError")
            )
            return
        if body.get("tools") and body.get("tool_choice", "auto") == "auto" and not fake.auto_tools:
            self._json(
                400,
                fake.error_body(
                    '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
                    400,
                ),
            )
            return
        tokens = render_tokens(body)
        prompt = len(tokens)
        limit = fake.max_model_len
        if prompt > limit:
            self._json(
                400,
                fake.error_body(
                    f"This model's maximum context length is {limit} tokens. However, your request has "
                    f"{prompt} input tokens. Please reduce the length of the input messages.",
                    400,
                ),
            )
            return
        max_tokens = body.get("max_tokens") or (limit - prompt)
        if prompt + max_tokens > limit:
            self._json(
                400,
                fake.error_body(
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's "
                    f"maximum context length is {limit} tokens and your request has {prompt} input tokens "
                    f"({max_tokens} > {limit} - {prompt}).",
                    400,
                ),
            )
            return
        if not body.get("stream"):
            self._json(400, fake.error_body("the fake serves stream: true only", 400))
            return
        cached = fake.cached_tokens(tokens)
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        try:
            self._stream(body, rid, prompt, cached, max_tokens)
            self._chunk(b"")  # end of the chunked body
            fake.completed.append(rid)
        except _Disconnected:
            fake.disconnects.append(rid)
            self.close_connection = True

    def _stream(self, body: dict[str, Any], rid: str, prompt: int, cached: int, max_tokens: int) -> None:
        fake = self.server_fake
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice: dict[str, Any] = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": fake.model,
                "choices": [choice],
            }

        self._event(chunk({"role": "assistant", "content": ""}))
        text = _last_user_text(body.get("messages", []))
        try:
            script = json.loads(text)
        except ValueError:
            script = None
        if not isinstance(script, dict) or not isinstance(script.get("script"), list):
            script = None
        steps = script["script"] if script else self._default_steps(body, text)
        used = 0
        calls = 0
        finish: str | None = None
        for step in steps:
            if "sleep" in step:
                time.sleep(float(step["sleep"]))
                continue
            if "raw" in step:
                self._chunk((step["raw"] + "\n\n").encode())
                continue
            if "drop" in step:
                raise _Disconnected()
            if "error" in step:
                self._event(fake.error_body(step["error"], 400))
                self._chunk(b"data: [DONE]\n\n")
                return
            cost = int(step.get("tokens", 1))
            if used + cost > max_tokens:
                finish = "length"
                break
            used += cost
            if "content" in step:
                self._event(chunk({"content": step["content"]}, "length" if used == max_tokens else None))
                if used == max_tokens:
                    finish = "sent"
                    break
            elif "reasoning" in step:
                self._event(chunk({step.get("field", "reasoning_content"): step["reasoning"]}))
            elif "tool_call" in step:
                call = step["tool_call"]
                index = calls
                calls += 1
                self._event(
                    chunk(
                        {
                            "tool_calls": [
                                {
                                    "id": call.get("id", f"chatcmpl-tool-{uuid.uuid4().hex[:24]}"),
                                    "type": "function",
                                    "index": index,
                                    "function": {"name": call["name"], "arguments": ""},
                                }
                            ]
                        }
                    )
                )
                for fragment in call.get("arguments", []):
                    self._event(
                        chunk({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]})
                    )
        if finish is None:
            used += 1  # the EOS token: counted, its text empty
            reason = (script or {}).get("finish_reason") or ("tool_calls" if calls else "stop")
            self._event(chunk({"content": ""}, reason))
        elif finish == "length":
            self._event(chunk({}, "length"))
        if body.get("stream_options", {}).get("include_usage") and (script or {}).get("usage", True):
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "total_tokens": prompt + used,
                "completion_tokens": used,
            }
            if fake.prompt_tokens_details and cached:
                usage["prompt_tokens_details"] = {"cached_tokens": cached}
            self._event(
                {
                    "id": rid,
                    "object": "chat.completion.chunk",
                    "created": created,
                    "model": fake.model,
                    "choices": [],
                    "usage": usage,
                }
            )
        self._chunk(b"data: [DONE]\n\n")

    @staticmethod
    def _default_steps(body: dict[str, Any], text: str) -> list[dict[str, Any]]:
        """Echo the user's words; under ``required`` or a named tool_choice,
        call the tool with ``{}`` (vLLM's guided decoding forces a call)."""
        choice = body.get("tool_choice")
        if body.get("tools") and (choice == "required" or isinstance(choice, dict)):
            name = (
                choice["function"]["name"]
                if isinstance(choice, dict)
                else body["tools"][0]["function"]["name"]
            )
            return [{"tool_call": {"name": name, "arguments": ["{", "}"]}}]
        words = _words(text)
        return [{"content": w if i == 0 else " " + w} for i, w in enumerate(words)]
