"""An OpenAI Responses API request body as the Messages request Missive answers.

The fields and their meaning are OpenAI's (API reference, "Create a model
response"; the ``openai`` Python SDK's ``ResponseCreateParams`` and
``ResponseInputItemParam``); the result is a body ``POST /v1/messages``
takes, validated by the core like any other:

* ``instructions`` -> ``system`` (first); ``input`` as a string is one user
  message; as a list of items: ``message`` items (``role`` ``user`` with
  ``input_text``/``input_image`` parts, ``assistant`` with
  ``output_text``/``refusal`` parts, ``system``/``developer``: leading ones
  join ``system``, later ones are mid-conversation ``system`` messages),
  ``function_call`` items (``tool_use`` blocks, ``arguments`` parsed),
  ``function_call_output`` items (``tool_result`` blocks), ``reasoning``
  items carrying ``encrypted_content`` (``thinking`` blocks with it as their
  signature: the core keeps those it signed, :mod:`.responses_stream`);
  consecutive items of one side merge into one turn;
* ``previous_response_id``: the kept conversation of that response
  (:mod:`.responses_store`) comes first, the new input after it;
* ``tools`` of type ``function`` -> ``tools``; ``web_search`` and
  ``namespace`` (the model answers without them) are reported as ignored, any other type is a 400
  naming it; ``tool_choice`` ``auto``/``none``/``required``/``{"type":
  "function", "name"}`` -> ``auto``/``none``/``any``/``tool``;
  ``parallel_tool_calls: false`` -> ``disable_parallel_tool_use``;
* ``max_output_tokens`` -> ``max_tokens`` (:data:`DEFAULT_MAX_TOKENS`
  when absent); ``temperature`` (0-2, above 1 sent as 1), ``top_p``;
* ``text.format`` ``json_schema`` (``json_object``) -> ``output_config.format``;
* ``reasoning.effort`` -> ``thinking`` (as ``reasoning_effort`` in
  :mod:`.chat_request`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .chat_request import _EFFORTS, DEFAULT_MAX_TOKENS, _bad, _number, image_block
from .errors import OpenAIRequestError

__all__ = ["ResponsesRequest", "translate", "Lookup"]

#: ``previous_response_id`` -> ``(system, messages)`` of its conversation, or None.
Lookup = Callable[[str], "tuple[list[Any], list[Any]] | None"]

#: Tool types dropped (and reported): the model answers without them (a
#: ``namespace``, a group of function tools whose calls name it, as Codex
#: sends its sub-agent tools, is not offered).
_DROPPED_TOOLS = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26", "namespace"})
#: Accepted and without effect here.
_ACCEPTED = frozenset(
    {
        "store",
        "metadata",
        "user",
        "service_tier",
        "safety_identifier",
        "prompt_cache_key",
        "prompt_cache_retention",
        "stream_options",
        "truncation",
        "include",
        "background",
        "client_metadata",
    }
)
_KNOWN = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "text",
        "reasoning",
        "stream",
        "previous_response_id",
    }
)
#: Refused: they need state or services Missive does not have.
_REFUSED = ("conversation", "prompt")


@dataclass
class ResponsesRequest:
    """The translation: the Messages body, what this request adds to the
    conversation (for the store), and what only the door needs."""

    body: dict[str, Any]
    model: str
    echo: dict[str, Any]
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    new_system: list[dict[str, Any]] = field(default_factory=list)
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    encrypted_reasoning: bool = False
    ignored: list[str] = field(default_factory=list)


def _string(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise _bad(f"{where}: expected a string", where)
    return value


def _text_parts(content: Any, where: str, kinds: tuple[str, ...]) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(f"{where}: expected a string or a list of content parts", where)
    texts = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds:
            raise _bad(
                f"{where}[{j}].type: content part type {kind!r} is not supported here", f"{where}[{j}].type"
            )
        texts.append(_string(part.get("text", part.get("refusal")), f"{where}[{j}].text"))
    return "".join(texts)


def _image(part: dict[str, Any], where: str) -> dict[str, Any]:
    if part.get("file_id") is not None and part.get("image_url") is None:
        raise _bad(f"{where}.file_id: file ids are not supported; send image_url", f"{where}.file_id")
    url = _string(part.get("image_url"), f"{where}.image_url")
    return image_block(url, f"{where}.image_url", data_param=f"{where}.image_url")


def _user_blocks(content: Any, where: str) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        raise _bad(f"{where}: expected a string or a list of content parts", where)
    blocks: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "text"):
            text = _string(part.get("text"), f"{where}[{j}].text")
            if text:
                blocks.append({"type": "text", "text": text})
        elif kind == "input_image":
            blocks.append(_image(part, f"{where}[{j}]"))
        else:
            raise _bad(
                f"{where}[{j}].type: content part type {kind!r} is not supported", f"{where}[{j}].type"
            )
    return blocks


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = _string(item.get("call_id"), f"{where}.call_id")
    name = _string(item.get("name"), f"{where}.name")
    arguments = item.get("arguments", "{}")
    try:
        args = json.loads(arguments or "{}") if isinstance(arguments, str) else None
    except ValueError:
        args = None
    if not isinstance(args, dict):
        raise _bad(f"{where}.arguments: expected a JSON object as a string", f"{where}.arguments")
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def _call_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    call_id = _string(item.get("call_id"), f"{where}.call_id")
    output = item.get("output")
    content: Any = output if isinstance(output, str) else _user_blocks(output, f"{where}.output")
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def _reasoning(item: dict[str, Any], where: str) -> dict[str, Any] | None:
    signature = item.get("encrypted_content")
    if not isinstance(signature, str) or not signature:
        return None  # nothing the model can be shown again (the core keeps only signed thinking)
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list):
        raise _bad(f"{where}.content: expected a list", f"{where}.content")
    text = "".join(p.get("text", "") for p in parts if isinstance(p, dict))
    return {"type": "thinking", "thinking": text, "signature": signature}


def _items(raw: Any, *, leading: bool) -> tuple[list[str], list[dict[str, Any]]]:
    """``(system texts, messages)`` of ``input``; ``leading``: system items
    before the first other item join ``system``."""
    if isinstance(raw, str):
        return [], [{"role": "user", "content": [{"type": "text", "text": raw}]}]
    if not isinstance(raw, list) or not raw:
        raise _bad("input: expected a string or a non-empty list of items", "input")
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role and role != "system":
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for i, item in enumerate(raw):
        where = f"input[{i}]"
        if not isinstance(item, dict):
            raise _bad(f"{where}: expected an object", where)
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role, content = item.get("role"), item.get("content")
            if role in ("system", "developer"):
                text = _text_parts(content, f"{where}.content", ("input_text", "text"))
                if leading:
                    system.append(text)
                elif text:
                    out.append({"role": "system", "content": [{"type": "text", "text": text}]})
                continue
            leading = False
            if role == "user":
                add("user", _user_blocks(content, f"{where}.content"))
            elif role == "assistant":
                text = _text_parts(
                    content, f"{where}.content", ("output_text", "refusal", "input_text", "text")
                )
                add("assistant", [{"type": "text", "text": text}] if text else [])
            else:
                raise _bad(
                    f"{where}.role: expected one of user, assistant, system, developer; got {role!r}",
                    f"{where}.role",
                )
            continue
        leading = False
        if kind == "function_call":
            add("assistant", [_call(item, where)])
        elif kind == "function_call_output":
            add("user", [_call_output(item, where)])
        elif kind == "reasoning":
            block = _reasoning(item, where)
            add("assistant", [block] if block else [])
        elif kind == "item_reference":
            raise _bad(f"{where}: item references are not supported; send the item itself", f"{where}.type")
        else:
            raise _bad(f"{where}.type: input item type {kind!r} is not supported", f"{where}.type")
    return system, [m for m in out if m["content"]]


def merged(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with consecutive turns of one side (not ``system``) made one."""
    out: list[dict[str, Any]] = []
    for message in messages:
        if out and out[-1]["role"] == message["role"] and message["role"] != "system":
            out[-1] = {"role": message["role"], "content": [*out[-1]["content"], *message["content"]]}
        else:
            out.append({"role": message["role"], "content": list(message["content"])})
    return out


def _tools(raw: Any, ignored: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(Messages tools, the function tools as the response echoes them)``."""
    if not isinstance(raw, list):
        raise _bad("tools: expected a list", "tools")
    tools, echoed = [], []
    for i, tool in enumerate(raw):
        kind = tool.get("type") if isinstance(tool, dict) else None
        if kind in _DROPPED_TOOLS:
            ignored.append(f"tools[{i}] ({kind})")
            continue
        if kind != "function":
            raise _bad(
                f"tools[{i}].type: tool type {kind!r} is not supported; only function tools are",
                f"tools[{i}].type",
            )
        name = _string(tool.get("name"), f"tools[{i}].name")
        schema = tool.get("parameters") or {"type": "object", "properties": {}}
        out: dict[str, Any] = {"name": name, "input_schema": schema}
        if tool.get("description"):
            out["description"] = tool["description"]
        if tool.get("strict") is True:
            out["strict"] = True
        tools.append(out)
        echoed.append(
            {
                "type": "function",
                "name": name,
                "description": tool.get("description"),
                "parameters": schema,
                "strict": tool.get("strict", True),
            }
        )
    return tools, echoed


def _tool_choice(raw: Any, parallel: Any) -> dict[str, Any] | None:
    choice: dict[str, Any]
    if raw is None or raw == "auto":
        choice = {"type": "auto"}
    elif raw == "none":
        choice = {"type": "none"}
    elif raw == "required":
        choice = {"type": "any"}
    elif isinstance(raw, dict) and raw.get("type") == "function":
        choice = {"type": "tool", "name": _string(raw.get("name"), "tool_choice.name")}
    else:
        kind = raw.get("type") if isinstance(raw, dict) else raw
        raise _bad(
            f"tool_choice: expected auto, none, required or a function by name; got {kind!r}", "tool_choice"
        )
    if parallel not in (None, True, False):
        raise _bad("parallel_tool_calls: expected a boolean", "parallel_tool_calls")
    if parallel is False and choice["type"] != "none":
        choice["disable_parallel_tool_use"] = True
    return None if raw is None and parallel is not False else choice


def _format(raw: Any) -> dict[str, Any] | None:
    kind = raw.get("type") if isinstance(raw, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_schema", "schema": {"type": "object"}}
    if kind == "json_schema":
        schema = raw.get("schema")
        if not isinstance(schema, dict):
            raise _bad("text.format.schema: expected an object", "text.format.schema")
        return {"type": "json_schema", "schema": schema}
    raise _bad("text.format.type: expected text, json_object or json_schema", "text.format.type")


def translate(raw: Any, lookup: Lookup) -> ResponsesRequest:
    """The :class:`ResponsesRequest` of a parsed ``POST /v1/responses`` body;
    ``lookup`` finds the conversation of a ``previous_response_id``.

    Raises:
        OpenAIRequestError: a body OpenAI would refuse or Missive cannot
            serve, naming the ``param``; an unknown ``previous_response_id``
            (``previous_response_not_found``, as OpenAI answers it).
    """
    if not isinstance(raw, dict):
        raise _bad("the request body must be a JSON object", None)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: expected a model id", "model")
    for name in _REFUSED:
        if raw.get(name) is not None:
            raise _bad(f"{name}: not supported by this server", name)
    if raw.get("background"):
        raise _bad("background: background responses are not supported by this server", "background")
    ignored: list[str] = []
    previous_id = raw.get("previous_response_id")
    previous: tuple[list[Any], list[Any]] | None = None
    if previous_id is not None:
        previous = lookup(_string(previous_id, "previous_response_id"))
        if previous is None:
            raise OpenAIRequestError(
                f"Previous response with id '{previous_id}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
    if raw.get("input") is None:
        raise _bad("input: expected a string or a list of items", "input")
    system_texts, new_messages = _items(raw["input"], leading=previous is None)
    new_system = [{"type": "text", "text": t} for t in system_texts if t]
    system: list[dict[str, Any]] = []
    instructions = raw.get("instructions")
    if instructions is not None:
        text = _text_parts(instructions, "instructions", ("input_text", "text"))
        if text:
            system.append({"type": "text", "text": text})
    earlier = previous[1] if previous else []
    system += (previous[0] if previous else []) + new_system
    body: dict[str, Any] = {"model": model, "messages": merged([*earlier, *new_messages])}
    if system:
        body["system"] = system
    maximum = raw.get("max_output_tokens")
    if maximum is not None and (isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1):
        raise _bad("max_output_tokens: expected an integer >= 1", "max_output_tokens")
    body["max_tokens"] = maximum or DEFAULT_MAX_TOKENS
    temperature = _number(raw, "temperature", 0, 2)
    if temperature is not None:
        if temperature > 1:
            ignored.append(f"temperature {temperature:g} sent as 1 (Missive's range is 0-1)")
        body["temperature"] = min(temperature, 1.0)
    top_p = _number(raw, "top_p", 0, 1)
    if top_p is not None:
        body["top_p"] = top_p
    echoed_tools: list[dict[str, Any]] = []
    if raw.get("tools"):
        tools, echoed_tools = _tools(raw["tools"], ignored)
        if tools:
            body["tools"] = tools
            choice = _tool_choice(raw.get("tool_choice"), raw.get("parallel_tool_calls"))
            if choice is not None:
                body["tool_choice"] = choice
    if "tools" not in body and raw.get("tool_choice") not in (None, "none", "auto"):
        raise _bad("tool_choice: no function tools were given", "tool_choice")
    output_config: dict[str, Any] = {}
    text_config = raw.get("text")
    if text_config is not None:
        if not isinstance(text_config, dict):
            raise _bad("text: expected an object", "text")
        if text_config.get("format") is not None:
            fmt = _format(text_config["format"])
            if fmt is not None:
                output_config["format"] = fmt
        if text_config.get("verbosity") not in (None, "medium"):
            ignored.append("text.verbosity")
    reasoning = raw.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise _bad("reasoning: expected an object", "reasoning")
    effort = (reasoning or {}).get("effort")
    if effort == "none":
        body["thinking"] = {"type": "disabled"}
    elif effort in _EFFORTS:
        body["thinking"] = {"type": "adaptive"}
        output_config["effort"] = _EFFORTS[effort]
    elif effort is not None:
        raise _bad("reasoning.effort: expected none, minimal, low, medium, high or xhigh", "reasoning.effort")
    if output_config:
        body["output_config"] = output_config
    stream = raw.get("stream") or False
    if not isinstance(stream, bool):
        raise _bad("stream: expected a boolean", "stream")
    body["stream"] = stream
    store = raw.get("store", True)
    if not isinstance(store, bool):
        raise _bad("store: expected a boolean", "store")
    include = raw.get("include") or []
    if not isinstance(include, list) or not all(isinstance(x, str) for x in include):
        raise _bad("include: expected a list of strings", "include")
    ignored += [f"include {x}" for x in include if x != "reasoning.encrypted_content"]
    for name in raw:
        if name not in _KNOWN and name not in _ACCEPTED and raw[name] is not None:
            ignored.append(name)
    echo = {
        "instructions": instructions,
        "max_output_tokens": maximum,
        "metadata": raw.get("metadata") or {},
        "parallel_tool_calls": raw.get("parallel_tool_calls", True),
        "previous_response_id": previous_id,
        "reasoning": {"effort": effort, "summary": (reasoning or {}).get("summary")},
        "store": store,
        "temperature": 1.0 if temperature is None else temperature,
        "text": {"format": (text_config or {}).get("format") or {"type": "text"}},
        "tool_choice": raw.get("tool_choice") or "auto",
        "tools": echoed_tools,
        "top_p": 1.0 if top_p is None else top_p,
        "truncation": raw.get("truncation") or "disabled",
        "user": raw.get("user"),
    }
    return ResponsesRequest(
        body=body,
        model=model,
        echo=echo,
        stream=stream,
        store=store,
        previous_response_id=previous_id,
        new_system=new_system if previous is None else [],
        new_messages=new_messages,
        encrypted_reasoning="reasoning.encrypted_content" in include,
        ignored=ignored,
    )
