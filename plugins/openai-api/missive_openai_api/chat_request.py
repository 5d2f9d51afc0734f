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
* ``n`` must be 1; ``seed``, ``user``, ``store``, ``metadata`` are accepted;
  what Missive does not act on (``logprobs``, penalties, ``logit_bias``...) is
  reported in the ``missive-ignored`` header.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from .errors import OpenAIRequestError

__all__ = ["ChatRequest", "translate", "DEFAULT_MAX_TOKENS"]

#: ``max_tokens`` of a request that sets neither ``max_completion_tokens`` nor
#: ``max_tokens`` (OpenAI's default is "until the model stops"; drivers clamp
#: this to what the context leaves).
DEFAULT_MAX_TOKENS = 32768

#: Accepted and without effect here (no sampling seed in the Messages request;
#: bookkeeping fields).
_ACCEPTED = frozenset({"seed", "user", "store", "metadata", "service_tier", "n"})
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
_DATA_URL = re.compile(
    r"^data:(?P<type>[\w.+-]+/[\w.+-]+)?(?P<params>(;[^;,]*)*?);base64,(?P<data>.*)$", re.S
)
_EFFORTS = {"minimal": "low", "low": "low", "medium": "medium", "high": "high", "xhigh": "xhigh"}


@dataclass
class ChatRequest:
    """The translation: the Messages body and what only the door needs."""

    body: dict[str, Any]
    model: str
    stream: bool = False
    include_usage: bool = False
    ignored: list[str] = field(default_factory=list)


def _bad(message: str, param: str | None, code: str | None = None) -> OpenAIRequestError:
    return OpenAIRequestError(message, param=param, code=code)


def _text_of(content: Any, where: str, *, kinds: tuple[str, ...] = ("text",)) -> str:
    """The text of system/developer/tool content: a string or text parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") not in kinds:
                raise _bad(f"{where}[{j}]: only text content parts are supported here", f"{where}[{j}]")
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise _bad(f"{where}[{j}].text: expected a string", f"{where}[{j}].text")
            parts.append(text)
        return "".join(parts)
    raise _bad(f"{where}: expected a string or a list of content parts", where)


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    image = part.get("image_url")
    url = image.get("url") if isinstance(image, dict) else image
    if not isinstance(url, str):
        raise _bad(f"{where}.image_url.url: expected a string", f"{where}.image_url.url")
    return image_block(url, f"{where}.image_url.url", data_param=where)


def image_block(url: str, field: str, *, data_param: str) -> dict[str, Any]:
    """The Messages ``image`` block of an OpenAI image URL (a ``data:`` URL
    or an http(s) one), shared by Chat Completions and Responses. ``field``
    names the URL's place in error messages; ``data_param`` is the ``param``
    of a malformed data URL's error."""
    if url.startswith("data:"):
        found = _DATA_URL.match(url)
        if found is None or not found.group("type"):
            raise _bad(f"{field}: a data URL must be data:<media type>;base64,<data>", data_param)
        return {
            "type": "image",
            "source": {"type": "base64", "media_type": found.group("type"), "data": found.group("data")},
        }
    if url.startswith(("http://", "https://")):
        return {"type": "image", "source": {"type": "url", "url": url}}
    raise _bad(f"{field}: expected a data: or http(s) URL", field)


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(f"{where}: expected a string or a list of content parts", where)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == "text" and isinstance(part.get("text"), str):
            if part["text"]:
                blocks.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            blocks.append(_image(part, f"{where}[{j}]"))
        else:
            raise _bad(f"{where}[{j}]: unsupported content part type {kind!r}", f"{where}[{j}].type")
    return blocks


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict) or call.get("type", "function") != "function":
        raise _bad(f"{where}: expected a function tool call", where)
    name, arguments, call_id = function.get("name"), function.get("arguments", "{}"), call.get("id")
    if not isinstance(name, str) or not isinstance(call_id, str):
        raise _bad(f"{where}: a tool call needs a string id and function.name", where)
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) else None
    except ValueError:
        args = None
    if not isinstance(args, dict):
        where_args = f"{where}.function.arguments"
        raise _bad(f"{where_args}: expected a JSON object as a string", where_args)
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _messages(raw: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``(system, messages)`` of the Messages body, merged by role."""
    if not isinstance(raw, list) or not raw:
        raise _bad("messages: expected a non-empty list", "messages")
    system: list[str] = []
    out: list[dict[str, Any]] = []
    leading = True

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if role in ("system", "developer"):
            text = _text_of(content, f"{where}.content")
            if leading:
                system.append(text)
            elif text:
                out.append({"role": "system", "content": [{"type": "text", "text": text}]})
            continue
        leading = False
        if role == "user":
            add("user", _user_blocks(content, f"{where}.content"))
        elif role == "assistant":
            blocks = []
            if content is not None:
                text = _text_of(content, f"{where}.content", kinds=("text", "refusal"))
                if text:
                    blocks.append({"type": "text", "text": text})
            calls = message.get("tool_calls") or []
            if not isinstance(calls, list):
                raise _bad(f"{where}.tool_calls: expected a list", f"{where}.tool_calls")
            blocks += [_tool_use(call, f"{where}.tool_calls[{j}]") for j, call in enumerate(calls)]
            add("assistant", blocks)
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise _bad(f"{where}.tool_call_id: expected a string", f"{where}.tool_call_id")
            text = _text_of(content, f"{where}.content")
            add("user", [{"type": "tool_result", "tool_use_id": call_id, "content": text}])
        else:
            raise _bad(
                f"{where}.role: expected one of system, developer, user, assistant, tool; got {role!r}",
                f"{where}.role",
            )
    return [{"type": "text", "text": t} for t in system if t], out


def _tools(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise _bad("tools: expected a list", "tools")
    tools = []
    for i, tool in enumerate(raw):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise _bad(f"tools[{i}]: only function tools are supported", f"tools[{i}].type")
        if not isinstance(function.get("name"), str):
            raise _bad(f"tools[{i}].function.name: expected a string", f"tools[{i}].function.name")
        out: dict[str, Any] = {
            "name": function["name"],
            "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
        }
        if function.get("description"):
            out["description"] = function["description"]
        if function.get("strict") is True:
            out["strict"] = True
        tools.append(out)
    return tools


def _tool_choice(raw: Any, parallel: Any) -> dict[str, Any] | None:
    choice: dict[str, Any]
    if raw is None:
        choice = {"type": "auto"}
    elif raw in ("auto", "none"):
        choice = {"type": raw}
    elif raw == "required":
        choice = {"type": "any"}
    elif isinstance(raw, dict) and raw.get("type") == "function":
        name = (raw.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise _bad("tool_choice.function.name: expected a string", "tool_choice.function.name")
        choice = {"type": "tool", "name": name}
    else:
        raise _bad("tool_choice: expected auto, none, required or a named function", "tool_choice")
    if parallel is False and choice["type"] != "none":
        choice["disable_parallel_tool_use"] = True
    elif parallel not in (None, True, False):
        raise _bad("parallel_tool_calls: expected a boolean", "parallel_tool_calls")
    if raw is None and "disable_parallel_tool_use" not in choice:
        return None
    return choice


def _number(body: dict[str, Any], name: str, low: float, high: float) -> float | None:
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise _bad(f"{name}: expected a number between {low:g} and {high:g}", name)
    return float(value)


def _output_format(raw: Any) -> dict[str, Any] | None:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_schema", "schema": {"type": "object"}}
    if kind == "json_schema":
        spec = raw.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise _bad(
                "response_format.json_schema.schema: expected an object", "response_format.json_schema"
            )
        return {"type": "json_schema", "schema": schema}
    raise _bad("response_format.type: expected text, json_object or json_schema", "response_format.type")


def translate(raw: Any) -> ChatRequest:
    """The :class:`ChatRequest` of a parsed Chat Completions body.

    Raises:
        OpenAIRequestError: a body OpenAI would refuse, or one Missive cannot
            serve (``n`` > 1, audio parts), naming the ``param``.
    """
    if not isinstance(raw, dict):
        raise _bad("the request body must be a JSON object", None)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: expected a model id", "model")
    n = raw.get("n")
    if n not in (None, 1):
        raise _bad("n: only n = 1 is supported", "n")
    system, messages = _messages(raw.get("messages"))
    body: dict[str, Any] = {"model": model, "messages": messages}
    if system:
        body["system"] = system
    ignored: list[str] = []
    maximum = raw.get("max_completion_tokens", raw.get("max_tokens"))
    if maximum is None:
        maximum = DEFAULT_MAX_TOKENS
    elif isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1:
        name = "max_completion_tokens" if "max_completion_tokens" in raw else "max_tokens"
        raise _bad(f"{name}: expected an integer >= 1", name)
    body["max_tokens"] = maximum
    temperature = _number(raw, "temperature", 0, 2)
    if temperature is not None:
        if temperature > 1:
            ignored.append(f"temperature {temperature:g} sent as 1 (Missive's range is 0-1)")
        body["temperature"] = min(temperature, 1.0)
    top_p = _number(raw, "top_p", 0, 1)
    if top_p is not None:
        body["top_p"] = top_p
    stop = raw.get("stop")
    if isinstance(stop, str):
        stop = [stop]
    if stop is not None:
        if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop):
            raise _bad("stop: expected a string or a list of strings", "stop")
        if stop:
            body["stop_sequences"] = stop
    if raw.get("tools"):
        body["tools"] = _tools(raw["tools"])
        choice = _tool_choice(raw.get("tool_choice"), raw.get("parallel_tool_calls"))
        if choice is not None:
            body["tool_choice"] = choice
    elif raw.get("tool_choice") not in (None, "none", "auto"):
        raise _bad("tool_choice: no tools were given", "tool_choice")
    output_config: dict[str, Any] = {}
    if raw.get("response_format") is not None:
        fmt = _output_format(raw["response_format"])
        if fmt is not None:
            output_config["format"] = fmt
    effort = raw.get("reasoning_effort")
    if effort == "none":
        body["thinking"] = {"type": "disabled"}
    elif effort in _EFFORTS:
        body["thinking"] = {"type": "adaptive"}
        output_config["effort"] = _EFFORTS[effort]
    elif effort is not None:
        raise _bad("reasoning_effort: expected none, minimal, low, medium, high or xhigh", "reasoning_effort")
    if output_config:
        body["output_config"] = output_config
    stream = raw.get("stream") or False
    if not isinstance(stream, bool):
        raise _bad("stream: expected a boolean", "stream")
    body["stream"] = stream
    options = raw.get("stream_options")
    include_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    for name in raw:
        if name in _REPORTED and raw[name] not in (None, False, 0, {}, []):
            ignored.append(name)
        elif name not in _KNOWN and name not in _ACCEPTED and name not in _REPORTED:
            ignored.append(name)
    return ChatRequest(body, model, stream, include_usage, ignored)


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
