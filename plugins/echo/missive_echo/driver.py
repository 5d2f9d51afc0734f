"""The echo driver: deterministic answers for tests and a model for plugin authors.

Without a script it answers with the last user message's text, one token per
whitespace-separated word. Tokens are counted the same way everywhere: the
prompt's size is the number of words in the system prompt and all turns.

A script is a user message whose text is a JSON object with a ``"script"``
list; each step is one of::

    {"text": "Hel"}                  a text delta (1 token, or "tokens": n)
    {"thinking": "hmm"}              a thinking delta
    {"echo_thinking": true}          text: the verified thinking replayed in the conversation
    {"tool_call": {"name": "f", "arguments": ["{\\"a\\"", ": 1}"]}}
    {"sleep": 0.5}                   seconds of silence
    {"wait_file": "/tmp/go"}         silence until that file exists (a test's go-ahead)
    {"error": {"type": "overloaded_error", "message": "..."}}   raise mid-stream

and the object may also hold ``"stop_reason"`` (default ``end_turn``),
``"error_before_start"`` (an error raised before ``Started``),
``"cache_read_input_tokens"`` and ``"then"``: a list of script objects
played, in order, when the conversation goes on after tool results with no
new user text (the core continuing after a server tool's result, or a
client's tool loop): the Kth one for the Kth assistant turn after the
scripted user message; past the end of the list, an empty answer.  Model settings may override capabilities:
``settings.capabilities = {tool_choice = ["auto"], thinking = true}``, and
``settings.script_file = "/path/script.json"`` scripts clients whose
messages a test does not write (Claude Code): the file, read at every
request, is a JSON list of script objects; the one with a ``"match"``
substring found in the last user turn (text or tool results) plays, else the
Nth one without ``"match"`` for a conversation with N-1 assistant turns (past
the end: echo).  A script in the last user message wins over the file.
``settings.tool_parser = "hermes"`` parses tool calls out of the scripted
text with that registered parser (as an in-process model's driver does), and
``settings.reasoning_parser = "think"`` separates reasoning written as text
(``<think>...</think>``) with that registered reasoning parser, and
``settings.serialize = true`` makes the model answer one request at a time
(FIFO, after ``Started``), like an in-process model, so tests can observe
queueing and that a disconnected client frees the model.

Images count :func:`missive.media.tokens.estimate_image_tokens` tokens each
(the echo "model" sees them as their pixel estimate). ``settings.report =
true`` answers, when no script plays, with the conversation the driver
received as one JSON text (system, turns, blocks; images as media type,
size, byte count and SHA-256; the request's affinity key as ``session``),
so tests can see what the core handed over.
``settings.count_tools = true`` counts the words of the offered tools'
definitions too (name, description, schema as JSON), as a model whose
prompt holds its tool list would. ``settings.start_delay`` (seconds) makes
its start-up take that long and
``settings.start_error`` makes it fail with that message, for tests of
models loaded on demand.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio

from missive.api import (
    ApiError,
    AuthenticationError,
    Capabilities,
    ConfigError,
    Driver,
    Finished,
    GenerationEvent,
    GenerationRequest,
    ImageInput,
    InvalidRequestError,
    MissiveError,
    ModelEntry,
    NotFoundError,
    OverloadedError,
    RateLimitError,
    ReasoningParser,
    Started,
    TextBlock,
    TextDelta,
    ThinkingDelta,
    TimeoutError_,
    ToolCallDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolParser,
    ToolResultBlock,
    ToolUseBlock,
    build_parser,
    clamp_max_tokens,
    conversation_image_tokens,
    fit_prompt,
    reasoning_parser_class,
)

ERRORS: dict[str, type[MissiveError]] = {
    cls.error_type: cls
    for cls in (
        InvalidRequestError,
        AuthenticationError,
        NotFoundError,
        RateLimitError,
        ApiError,
        TimeoutError_,
        OverloadedError,
    )
}


#: Seconds between two looks for a ``wait_file`` step's file.
WAIT_FILE_POLL = 0.02


def _words(text: str) -> list[str]:
    return text.split()


def _last_user_text(request: GenerationRequest) -> str:
    """The last user turn's text with its tool results' text (for ``match``)."""
    turns = request.conversation.turns
    if not turns or turns[-1].role != "user":
        return ""
    parts = [turns[-1].text()]
    for block in turns[-1].blocks:
        if isinstance(block, ToolResultBlock):
            content = block.content
            if isinstance(content, str):
                parts.append(content)
            elif content:
                parts.extend(getattr(b, "text", "") for b in content)
    return "\n".join(parts)


def _file_script(path: Path, request: GenerationRequest) -> dict[str, Any] | None:
    """The script ``settings.script_file`` gives for this request, if any.

    The file (read at every request, so a test may rewrite it between runs)
    holds a JSON list of script objects. An object with ``"match"`` plays when
    that substring is in the last user turn's text or tool results; otherwise
    the Nth object without ``"match"`` plays for a conversation holding N-1
    assistant turns. None (echo) past the end of the list.

    Raises:
        ApiError: the file cannot be read or is not a JSON list of objects
            with a ``"script"`` list (a broken test setup, not a client mistake).
    """
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ApiError(f"echo script_file {path}: {exc}") from None
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("script"), list) for e in entries
    ):
        raise ApiError(f"echo script_file {path}: not a list of objects with a \"script\" list")
    last = _last_user_text(request)
    for entry in entries:
        if isinstance(entry.get("match"), str) and entry["match"] in last:
            return entry
    ordered = [e for e in entries if "match" not in e]
    n = sum(1 for t in request.conversation.turns if t.role == "assistant")
    return ordered[n] if n < len(ordered) else None


def _then_script(turns: list[Any]) -> dict[str, Any] | None:
    """The ``"then"`` script for a last user turn holding only tool results
    (see the module doc), or None when the conversation has none."""
    last = turns[-1]
    if last.text() or not any(isinstance(b, ToolResultBlock) for b in last.blocks):
        return None
    for k in range(len(turns) - 2, -1, -1):
        turn = turns[k]
        if turn.role != "user" or not turn.text():
            continue
        try:
            data = json.loads(turn.text())
        except ValueError:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("then"), list):
            return None
        n = sum(1 for t in turns[k + 1 :] if t.role == "assistant") - 1
        then = data["then"]
        return then[n] if 0 <= n < len(then) else {"script": []}
    return None


def _describe(block: Any) -> dict[str, Any]:
    if isinstance(block, ImageInput):
        return {
            "type": "image",
            "media_type": block.media_type,
            "width": block.width,
            "height": block.height,
            "bytes": len(block.data),
            "sha256": hashlib.sha256(block.data).hexdigest(),
        }
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        content = block.content
        described: Any = content if not isinstance(content, list) else [_describe(b) for b in content]
        return {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": described}
    return {"type": str(getattr(block, "type", type(block).__name__))}


def report(request: GenerationRequest) -> str:
    """The conversation as the driver received it, as JSON (``settings.report``)."""
    conv = request.conversation
    return json.dumps(
        {
            "system": conv.system,
            "turns": [{"role": t.role, "blocks": [_describe(b) for b in t.blocks]} for t in conv.turns],
            "prefill": conv.prefill,
            "session": request.session,
        }
    )


def _error(spec: dict[str, Any]) -> MissiveError:
    cls = ERRORS.get(spec.get("type", "api_error"), ApiError)
    return cls(spec.get("message", "scripted error"), retry_after=spec.get("retry_after"))


class EchoDriver(Driver):
    def __init__(self, model_id: str, entry: ModelEntry, capabilities: Capabilities) -> None:
        overrides = entry.settings.get("capabilities", {})
        super().__init__(model_id, entry, capabilities.model_copy(update=overrides))
        self._serial = anyio.Semaphore(1) if entry.settings.get("serialize") else None
        self.loaded = False

    async def start(self) -> None:
        """``settings.start_delay`` seconds of "loading" (tests of models
        loaded on demand); ``settings.start_error`` fails the start with that
        message."""
        await anyio.sleep(float(self.entry.settings.get("start_delay", 0)))
        message = self.entry.settings.get("start_error")
        if message:
            raise ConfigError(f"model '{self.model_id}': {message}")
        self.loaded = True

    async def aclose(self) -> None:
        self.loaded = False

    async def status(self) -> dict[str, Any]:
        return {"loaded": self.loaded}

    def _prompt_tokens(self, request: GenerationRequest) -> int:
        conv = request.conversation
        # Replayed thinking that reaches the prompt (signature verified) counts too.
        words = len(_words(conv.system or "")) + sum(
            len(_words(t.text())) + len(_words(t.thinking())) for t in conv.turns
        )
        if self.entry.settings.get("count_tools"):
            words += sum(
                len(_words(f"{t.name} {t.description} {json.dumps(t.input_schema)}")) for t in request.tools
            )
        return words + len(_words(conv.prefill or "")) + conversation_image_tokens(conv)

    def tool_parser(self, request: GenerationRequest) -> ToolParser | None:
        name = self.entry.settings.get("tool_parser")
        if not name:
            return None
        constrained = request.tool_choice.mode in ("any", "tool")
        return build_parser(self.tool_parser_specs, name, request.tools, constrained=constrained)

    def reasoning_parser(self, request: GenerationRequest) -> ReasoningParser | None:
        name = self.entry.settings.get("reasoning_parser")
        if not name:
            return None
        return reasoning_parser_class(self.reasoning_parser_specs, name)()

    async def count_tokens(self, request: GenerationRequest) -> int:
        return self._prompt_tokens(request)

    def _script(self, request: GenerationRequest) -> dict[str, Any] | None:
        turns = request.conversation.turns
        if not turns or turns[-1].role != "user":
            return None
        if (then := _then_script(turns)) is not None:
            return then
        try:
            data = json.loads(turns[-1].text())
        except ValueError:
            data = None
        if isinstance(data, dict) and isinstance(data.get("script"), list):
            return data
        path = self.entry.settings.get("script_file")
        return _file_script(Path(path), request) if path else None

    async def generate(self, request: GenerationRequest) -> AsyncIterator[GenerationEvent]:
        script = self._script(request)
        prompt = self._prompt_tokens(request)
        fit_prompt(request.max_tokens, prompt, self.context_window)  # refused before anything starts
        if script and script.get("error_before_start"):
            raise _error(script["error_before_start"])
        cached = int(script.get("cache_read_input_tokens", 0)) if script else 0
        yield Started(input_tokens=prompt - cached, cache_read_input_tokens=cached)
        if self._serial is None:
            async with aclosing(self._play(request, script, prompt)) as events:
                async for event in events:
                    yield event
            return
        async with self._serial:
            async with aclosing(self._play(request, script, prompt)) as events:
                async for event in events:
                    yield event

    async def _play(
        self, request: GenerationRequest, script: dict[str, Any] | None, prompt: int
    ) -> AsyncIterator[GenerationEvent]:
        budget = clamp_max_tokens(request.max_tokens, prompt, self.context_window)
        if script is None and self.entry.settings.get("report"):
            if budget < 1:
                yield Finished("max_tokens", output_tokens=0)
                return
            yield TextDelta(report(request), tokens=1)
            yield Finished("end_turn", output_tokens=1)
            return
        if script is None:
            turns = request.conversation.turns
            words = _words(turns[-1].text()) if turns else []
            for i, word in enumerate(words):
                if i >= budget:
                    yield Finished("max_tokens", output_tokens=budget)
                    return
                yield TextDelta(word if i == 0 else " " + word)
            yield Finished("end_turn", output_tokens=len(words))
            return
        used = 0
        for step in script["script"]:
            if "sleep" in step:
                await anyio.sleep(float(step["sleep"]))
            elif "wait_file" in step:
                # A test holds the stream here while it looks at what the
                # client shows so far, then creates the file: no timing.
                while not Path(step["wait_file"]).exists():
                    await anyio.sleep(WAIT_FILE_POLL)
            elif "error" in step:
                raise _error(step["error"])
            else:
                tokens = int(step.get("tokens", 1))
                if used + tokens > budget:
                    yield Finished("max_tokens", output_tokens=used)
                    return
                used += tokens
                if "text" in step:
                    yield TextDelta(step["text"], tokens=tokens)
                elif step.get("echo_thinking"):
                    replayed = [t.thinking() for t in request.conversation.turns if t.thinking()]
                    text = " | ".join(replayed) if replayed else "(no replayed thinking)"
                    yield TextDelta(f"replayed thinking: {text}", tokens=tokens)
                elif "thinking" in step:
                    yield ThinkingDelta(step["thinking"], tokens=tokens)
                elif "tool_call" in step:
                    call = step["tool_call"]
                    yield ToolCallStart(name=call["name"], id=call.get("id"))
                    for fragment in call.get("arguments", []):
                        yield ToolCallDelta(fragment, tokens=0)
                    yield ToolCallEnd(tokens=tokens)
        yield Finished(script.get("stop_reason", "end_turn"), output_tokens=used)
