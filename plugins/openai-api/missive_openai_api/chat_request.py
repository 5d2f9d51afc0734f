"""An OpenAI Chat Completions request body as the Messages request Missive answers.

The fields and their meaning are OpenAI's (API reference, "Create chat
completion"; the ``openai`` Python SDK's ``CompletionCreateParams``); the
result is the body ``POST /v1/messages`` takes, validated by the core like
any other, so the same models, parsers, grammars, admission and prompt cache
apply:

* ``messages``: leading ``system``/``developer`` messages become ``system``,
  later ones mid-conversation ``system`` messages; ``user`` content (text,
  ``image_url`` parts as data URLs or http(s) URLs); ``assistant`` content
  and ``tool_calls`` (``tool_use`` blocks, their ``arguments`` parsed);
  ``role: "tool"`` results (``tool_result`` blocks), the consecutive
  user-side messages merged into one user turn, consecutive assistant
  messages into one assistant turn;
* ``tools`` (``function``) -> ``tools`` with ``input_schema``; ``tool_choice``
  ``auto``/``none``/``required``/named -> ``auto``/``none``/``any``/``tool``;
  ``parallel_tool_calls: false`` -> ``disable_parallel_tool_use``;
* ``max_completion_tokens`` (or the older ``max_tokens``) -> ``max_tokens``,
  :data:`DEFAULT_MAX_TOKENS` when absent (drivers clamp it to the context left);
* ``temperature`` (OpenAI's 0-2: above 1 is sent as 1 and reported),
  ``top_p``, ``stop`` -> ``stop_sequences``;
* ``response_format`` ``json_schema`` -> ``output_config.format`` (``json_object``
  as the schema ``{"type": "object"}``);
* ``reasoning_effort`` -> ``thinking`` (``none``: disabled; else adaptive with
  ``output_config.effort``, ``minimal`` as ``low``);
* ``n`` must be 1; ``seed``, ``user``, ``store``, ``metadata`` are accepted
  (``metadata``, ``stream_options`` and ``stop`` within OpenAI's limits:
  :mod:`.limits`; tool calls and tool messages paired: :mod:`.tool_pairs`);
  what Missive does not act on (``logprobs``, penalties, ``logit_bias``...,
  and fields of a message, part, call or tool it does not read, such as a
  message's ``name``) is reported in the ``missive-ignored`` header.

Every field read is type-checked (:mod:`.common`); tool-call ids the
Messages API does not allow are sent as allowed ones (:class:`.turns.ToolIds`);
:attr:`ChatRequest.paths` names the request's fields in the core's errors
(:class:`.errors.Paths`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .common import (
    bad,
    checked,
    effort_of,
    function_tool,
    image_block,
    json_format,
    optional,
    report_unknown,
    sampling,
    text_of,
    tool_choice,
    tool_use,
    user_blocks,
)
from .errors import CHAT_WORDS, COMMON_WORDS, Paths
from .limits import check_metadata, check_stop, check_stream_options
from .tool_pairs import check_chat_calls
from .turns import Origin, ToolIds, Turns
from .value_rules import (
    check_format_name,
    check_logprobs_and_penalties,
    check_service_tier,
    check_tool_choice_value,
)

__all__ = ["ChatRequest", "translate"]

#: Accepted and without effect here (no sampling seed in the Messages request;
#: bookkeeping fields), with their types.
_ACCEPTED = {
    "seed": "integer",
    "user": "string",
    "store": "boolean",
    "metadata": "object",
    "service_tier": "string",
    "n": "integer",
}
#: Known, not acted on: reported.
_REPORTED = frozenset(
    {
        "frequency_penalty",
        "presence_penalty",
        "logit_bias",
        "logprobs",
        "top_logprobs",
        "modalities",
        "audio",
        "prediction",
        "web_search_options",
        "verbosity",
        "prompt_cache_key",
        "safety_identifier",
    }
)
_KNOWN = frozenset(
    {
        "model",
        "messages",
        "max_tokens",
        "max_completion_tokens",
        "temperature",
        "top_p",
        "stop",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "response_format",
        "reasoning_effort",
        "stream",
        "stream_options",
    }
)
#: The fields read of each role's message (others are reported).
_MESSAGE_FIELDS = {
    "system": frozenset({"role", "content"}),
    "developer": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content", "tool_calls"}),
    "tool": frozenset({"role", "content", "tool_call_id"}),
}
_CALL_FIELDS = frozenset({"id", "type", "function"})
_CALL_ORIGIN = {"id": "id", "name": "function.name", "input": "function.arguments"}
_RESULT_ORIGIN = {"tool_use_id": "tool_call_id", "content": "content"}
_TOOL_ORIGIN = {"input_schema": "parameters"}


@dataclass
class ChatRequest:
    """The translation: the Messages body and what only the door needs."""

    body: dict[str, Any]
    model: str
    stream: bool = False
    include_usage: bool = False
    ignored: list[str] = field(default_factory=list)
    paths: Paths = field(default_factory=lambda: Paths(Turns()))


def _image(part: dict[str, Any], at: str, ignored: list[str]) -> tuple[dict[str, Any], Origin]:
    image = part.get("image_url")
    url = checked(image.get("url") if isinstance(image, dict) else image, "string", f"{at}.image_url.url")
    if isinstance(image, dict):
        report_unknown(image, frozenset({"url", "detail"}), f"{at}.image_url", ignored)
    report_unknown(part, frozenset({"type", "image_url"}), at, ignored)
    block = image_block(url, f"{at}.image_url.url", data_param=at)
    return block, Origin(at, {"source": "image_url.url"})


def _calls(message: dict[str, Any], where: str, ids: ToolIds, ignored: list[str]) -> list[Any]:
    calls = optional(message, "tool_calls", "list", f"{where}.tool_calls") or []
    blocks = []
    for j, call in enumerate(calls):
        at = f"{where}.tool_calls[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(call, dict)
            or not isinstance(function, dict)
            or call.get("type", "function") != "function"
        ):
            raise bad(f"{at}: expected a function tool call", at)
        report_unknown(call, _CALL_FIELDS, at, ignored)
        report_unknown(function, frozenset({"name", "arguments"}), f"{at}.function", ignored)
        blocks.append(
            tool_use(call.get("id"), function.get("name"), function.get("arguments"), at, _CALL_ORIGIN, ids)
        )
    return blocks


def _messages(raw: Any, ids: ToolIds, ignored: list[str]) -> tuple[list[tuple[str, str]], Turns]:
    """``(system texts with their paths, turns)`` of ``messages``."""
    if not isinstance(raw, list) or not raw:
        raise bad("messages: expected a non-empty list", "messages")
    system: list[tuple[str, str]] = []
    turns = Turns()
    leading = True
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise bad(f"{where}: expected an object", where)
        role, content = message.get("role"), message.get("content")
        if role not in _MESSAGE_FIELDS:
            raise bad(
                f"{where}.role: expected one of system, developer, user, assistant, tool; got {role!r}",
                f"{where}.role",
            )
        report_unknown(message, _MESSAGE_FIELDS[role], where, ignored)
        if role in ("system", "developer"):
            turns.instruction(
                text_of(content, f"{where}.content", ("text",), ignored), where, leading, system
            )
            continue
        leading = False
        if role == "user":
            turns.add(
                "user",
                user_blocks(content, f"{where}.content", ("text",), ("image_url", _image), ignored),
                where,
            )
        elif role == "assistant":
            blocks = []
            if content is not None:
                text = text_of(content, f"{where}.content", ("text", "refusal"), ignored)
                if text:
                    blocks.append(({"type": "text", "text": text}, Origin(f"{where}.content")))
            turns.add("assistant", blocks + _calls(message, where, ids, ignored), where)
        else:
            call_id = checked(message.get("tool_call_id"), "string", f"{where}.tool_call_id")
            text = text_of(content, f"{where}.content", ("text",), ignored)
            result = {"type": "tool_result", "tool_use_id": ids.inward(call_id), "content": text}
            turns.add("user", [(result, Origin(where, _RESULT_ORIGIN))], where)
    if not turns.messages:
        raise bad(
            "messages: expected at least one user, assistant or tool message; system and developer "
            "messages alone give the model nothing to answer",
            "messages",
        )
    return [(t, w) for t, w in system if t], turns.non_empty()


def _tools(raw: Any, ignored: list[str]) -> tuple[list[dict[str, Any]], list[Origin]]:
    tools, origins = [], []
    for i, tool in enumerate(checked(raw, "list", "tools")):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else None
            raise bad(
                f"tools[{i}].type: expected 'function' (only function tools are supported); got {kind!r}",
                f"tools[{i}].type",
            )
        if function is None:
            raise bad(
                f"Missing required parameter: 'tools[{i}].function'.",
                f"tools[{i}].function",
                "missing_required_parameter",
            )
        checked(function, "object", f"tools[{i}].function")
        report_unknown(tool, frozenset({"type", "function"}), f"tools[{i}]", ignored)
        tools.append(function_tool(function, f"tools[{i}].function", ignored, frozenset()))
        origins.append(Origin(f"tools[{i}].function", _TOOL_ORIGIN, frozenset({"input_schema"})))
    return tools, origins


def _stop(raw: Any) -> list[str]:
    stop = [raw] if isinstance(raw, str) else raw
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
        raise bad("stop: expected a string or a list of strings", "stop")
    return stop


def translate(raw: Any) -> ChatRequest:
    """The :class:`ChatRequest` of a parsed Chat Completions body.

    Raises:
        OpenAIRequestError: a body OpenAI would refuse, or one Missive cannot
            serve (``n`` > 1, audio parts), naming the ``param``.
    """
    if not isinstance(raw, dict):
        raise bad("the request body must be a JSON object", None)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model: expected a model id", "model")
    for name, kind in _ACCEPTED.items():
        optional(raw, name, kind)
    check_metadata(raw)
    check_service_tier(raw)
    check_logprobs_and_penalties(raw, penalties=True)
    check_tool_choice_value(raw)
    fmt = raw.get("response_format")
    if (
        isinstance(fmt, dict)
        and fmt.get("type") == "json_schema"
        and isinstance(fmt.get("json_schema"), dict)
    ):
        check_format_name({"type": "json_schema", **fmt["json_schema"]}, "response_format.json_schema")
    if raw.get("n") not in (None, 1):
        raise bad("n: only n = 1 is supported", "n")
    ignored: list[str] = []
    ids = ToolIds()
    system, turns = _messages(raw.get("messages"), ids, ignored)
    check_chat_calls(raw["messages"])
    body: dict[str, Any] = {"model": model, "messages": turns.messages}
    if system:
        body["system"] = [{"type": "text", "text": t} for t, _ in system]
    optional(raw, "max_tokens", "integer")
    maximum = "max_completion_tokens" if raw.get("max_completion_tokens") is not None else "max_tokens"
    sampling(raw, body, maximum, ignored)
    if raw.get("stop") is not None and (stop := _stop(raw["stop"])):
        check_stop(stop)
        body["stop_sequences"] = stop
    parallel = optional(raw, "parallel_tool_calls", "boolean")
    tool_origins: list[Origin] = []
    if raw.get("tools"):
        body["tools"], tool_origins = _tools(raw["tools"], ignored)
        choice = tool_choice(raw.get("tool_choice"), parallel, ("function", "name"))
        if choice is not None:
            body["tool_choice"] = choice
    elif raw.get("tool_choice") not in (None, "none", "auto"):
        raise bad("tool_choice: no tools were given", "tool_choice")
    output_config: dict[str, Any] = {}
    fmt = optional(raw, "response_format", "object")
    if fmt is not None:
        spec = optional(fmt, "json_schema", "object", "response_format.json_schema") or {}
        found = json_format(
            fmt.get("type"), spec.get("schema"), "response_format.json_schema", "response_format.type"
        )
        if found is not None:
            output_config["format"] = found
    thinking, effort = effort_of(raw.get("reasoning_effort"), "reasoning_effort")
    if thinking is not None:
        body["thinking"] = thinking
    if effort is not None:
        output_config["effort"] = effort
    if output_config:
        body["output_config"] = output_config
    stream = optional(raw, "stream", "boolean") or False
    body["stream"] = stream
    options = optional(raw, "stream_options", "object") or {}
    check_stream_options(raw)
    include_usage = optional(options, "include_usage", "boolean", "stream_options.include_usage") or False
    for name in raw:
        if name in _REPORTED and raw[name] not in (None, False, 0, {}, []):
            ignored.append(name)
        elif name not in _KNOWN and name not in _ACCEPTED and name not in _REPORTED:
            ignored.append(name)
    fields = {
        "max_tokens": maximum,
        "stop_sequences": "stop",
        "tool_choice.name": "tool_choice.function.name",
        "tool_choice.disable_parallel_tool_use": "parallel_tool_calls",
        "output_config.format": "response_format",
        "output_config.format.schema": "response_format.json_schema.schema",
        "output_config.effort": "reasoning_effort",
        "thinking": "reasoning_effort",
    }
    if isinstance(raw.get("stop"), str):
        fields["stop_sequences.0"] = "stop"
    paths = Paths(
        turns,
        system=[w for _, w in system],
        tools=tool_origins,
        fields=fields,
        words=(
            *CHAT_WORDS,
            *COMMON_WORDS,
            ("`max_tokens`", f"`{maximum}`"),
            ("stop_sequences", "stop"),
            ("output_config.format", "response_format"),
        ),
        ids=ids,
    )
    return ChatRequest(body, model, stream, include_usage, ignored, paths)
