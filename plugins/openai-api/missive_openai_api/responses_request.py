"""An OpenAI Responses API request body as the Messages request Missive answers.

The fields and their meaning are OpenAI's (API reference, "Create a model
response"; the ``openai`` Python SDK's ``ResponseCreateParams`` and
``ResponseInputItemParam``); the result is a body ``POST /v1/messages``
takes, validated by the core like any other:

* ``instructions`` -> ``system`` (first); ``input`` as a string is one user
  message; as a list of items, turns (:mod:`.responses_items`);
* ``previous_response_id``: the kept conversation of that response
  (:mod:`.responses_store`) comes first, the new input after it;
* ``tools`` of type ``function``, and the functions of ``namespace`` tools,
  -> ``tools`` (:mod:`.responses_tools`; ``web_search`` is left out and
  reported, any other type is a 400 naming it); ``tool_choice`` ``auto``/``none``/``required``/``{"type":
  "function", "name"}`` -> ``auto``/``none``/``any``/``tool``;
  ``parallel_tool_calls: false`` -> ``disable_parallel_tool_use``;
* ``max_output_tokens`` -> ``max_tokens`` (:data:`DEFAULT_MAX_TOKENS`
  when absent); ``temperature`` (0-2, above 1 sent as 1), ``top_p``;
* ``text.format`` ``json_schema`` (``json_object``) -> ``output_config.format``;
* ``reasoning.effort`` -> ``thinking`` (as ``reasoning_effort`` in
  :mod:`.chat_request`); ``reasoning.summary`` (or its deprecated name
  ``generate_summary``) ``auto``/``concise``/``detailed``: reasoning items
  carry the reasoning as their summary (:mod:`.responses_stream`).

Every field read is type-checked (:mod:`.common`), and held to OpenAI's
limits (:mod:`.limits`: ``metadata``, ``stream_options``, ``truncation``,
``max_output_tokens`` >= 16); ``function_call`` and ``function_call_output``
items pair up (:mod:`.tool_pairs`); :attr:`ResponsesRequest.paths`
names the request's fields in the core's errors (:class:`.errors.Paths`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .common import (
    bad,
    effort_of,
    json_format,
    optional,
    sampling,
    text_of,
    tool_choice,
)
from .errors import COMMON_WORDS, RESPONSES_WORDS, OpenAIRequestError, Paths
from .limits import check_metadata, check_min_output_tokens, check_stream_options, check_truncation
from .responses_items import items
from .responses_tools import tools_of
from .tool_pairs import check_response_calls
from .turns import ToolIds, Turns
from .value_rules import (
    check_format_name,
    check_include,
    check_item_ids,
    check_logprobs_and_penalties,
    check_service_tier,
    check_tool_choice_value,
)

__all__ = ["ResponsesRequest", "translate", "Lookup"]

#: ``previous_response_id`` -> ``(system, messages)`` of its conversation, or None.
Lookup = Callable[[str], "tuple[list[Any], list[Any]] | None"]

#: Accepted and without effect here, with their types.
_ACCEPTED = {
    "store": "boolean",
    "metadata": "object",
    "user": "string",
    "service_tier": "string",
    "safety_identifier": "string",
    "prompt_cache_key": "string",
    "prompt_cache_retention": "string",
    "stream_options": "object",
    "truncation": "string",
    "include": "list",
    "background": "boolean",
    "client_metadata": "object",
}
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
    conversation (for the store: its turns, and ``raw_input`` for the
    listing of its input items), and what only the door needs."""

    body: dict[str, Any]
    model: str
    echo: dict[str, Any]
    stream: bool = False
    store: bool = True
    previous_response_id: str | None = None
    new_system: list[dict[str, Any]] = field(default_factory=list)
    new_messages: list[dict[str, Any]] = field(default_factory=list)
    encrypted_reasoning: bool = False
    raw_input: Any = None
    summary: bool = False
    background: bool = False
    web_search: bool = False
    search_sources: bool = False
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    paths: Paths = field(default_factory=lambda: Paths(Turns()))


#: ``reasoning.summary`` values (the SDK's ``Reasoning.summary``; ``generate_summary``
#: is its deprecated name).
_SUMMARIES = ("auto", "concise", "detailed")


def _summary(reasoning: dict[str, Any]) -> str | None:
    """The reasoning summary asked for, or None."""
    for name in ("summary", "generate_summary"):
        value = reasoning.get(name)
        if value is not None and value not in _SUMMARIES:
            expected = ", ".join(_SUMMARIES)
            raise bad(f"reasoning.{name}: expected one of {expected}; got {value!r}", f"reasoning.{name}")
    found: str | None = reasoning.get("summary") or reasoning.get("generate_summary")
    return found


def _previous(raw: dict[str, Any], lookup: Lookup) -> tuple[str | None, tuple[list[Any], list[Any]] | None]:
    previous_id = optional(raw, "previous_response_id", "string")
    if previous_id is None:
        return None, None
    previous = lookup(previous_id)
    if previous is None:
        raise OpenAIRequestError(
            f"Previous response with id '{previous_id}' not found.",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    return previous_id, previous


def _checked_top(raw: Any) -> str:
    """The model of ``raw``, once the fields refused or of a wrong type are refused."""
    if not isinstance(raw, dict):
        raise bad("the request body must be a JSON object", None)
    model = raw.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model: expected a model id", "model")
    for name in _REFUSED:
        if raw.get(name) is not None:
            raise bad(f"{name}: not supported by this server", name)
    for name, kind in _ACCEPTED.items():
        optional(raw, name, kind)
    optional(raw, "stream", "boolean")
    optional(raw, "max_output_tokens", "integer")
    check_metadata(raw)
    check_stream_options(raw)
    check_truncation(raw)
    check_min_output_tokens(raw)
    check_service_tier(raw)
    check_logprobs_and_penalties(raw, penalties=False)
    check_tool_choice_value(raw)
    check_item_ids(raw.get("input"))
    text = raw.get("text")
    if isinstance(text, dict) and isinstance(text.get("format"), dict):
        check_format_name(text["format"], "text.format")
    if raw.get("background") and raw.get("store") is False:
        message = "a background response is kept to be polled; it cannot be made with store false"
        raise bad(f"store: {message}", "store")
    if raw.get("input") is None:
        raise bad("input: expected a string or a list of items", "input")
    return model


def translate(raw: Any, lookup: Lookup, *, server_tools: frozenset[str] = frozenset()) -> ResponsesRequest:
    """The :class:`ResponsesRequest` of a parsed ``POST /v1/responses`` body;
    ``lookup`` finds the conversation of a ``previous_response_id``;
    ``server_tools`` are those the server runs
    (:attr:`missive.api.Gateway.server_tools`).

    Raises:
        OpenAIRequestError: a body OpenAI would refuse or Missive cannot
            serve, naming the ``param``; an unknown ``previous_response_id``
            (``previous_response_not_found``, as OpenAI answers it).
    """
    model = _checked_top(raw)
    ignored: list[str] = []
    ids = ToolIds()
    previous_id, previous = _previous(raw, lookup)
    system_texts, new = items(raw["input"], leading=previous is None, ids=ids, ignored=ignored)
    new_system = [{"type": "text", "text": t} for t, _ in system_texts]
    system: list[dict[str, Any]] = []
    system_paths: list[str] = []
    instructions = raw.get("instructions")
    if instructions is not None:
        text = text_of(instructions, "instructions", ("input_text", "text"), ignored)
        if text:
            system.append({"type": "text", "text": text})
            system_paths.append("instructions")
    earlier = previous[0] if previous else []
    system += earlier + new_system
    system_paths += ["previous_response_id"] * len(earlier) + [w for _, w in system_texts]
    turns = Turns.of(previous[1], "previous_response_id") if previous else Turns()
    turns.extend(new)
    if not turns.messages:
        raise bad(
            "input: expected at least one message or item besides system and developer messages; "
            "instructions alone give the model nothing to answer",
            "input",
        )
    check_response_calls(turns, ids)
    body: dict[str, Any] = {"model": model, "messages": turns.messages}
    if system:
        body["system"] = system
    sampling(raw, body, "max_output_tokens", ignored)
    parallel = optional(raw, "parallel_tool_calls", "boolean")
    offered = tools_of(raw.get("tools") or [], ignored, web_search="web_search" in server_tools)
    if offered.tools:
        body["tools"] = offered.tools
        choice = tool_choice(raw.get("tool_choice"), parallel, ("name",))
        if choice is not None:
            body["tool_choice"] = offered.choice(choice)
    if "tools" not in body and raw.get("tool_choice") not in (None, "none", "auto"):
        raise bad("tool_choice: no function tools were given", "tool_choice")
    output_config: dict[str, Any] = {}
    text_config = optional(raw, "text", "object") or {}
    fmt = optional(text_config, "format", "object", "text.format")
    if fmt is not None:
        found = json_format(fmt.get("type"), fmt.get("schema"), "text.format", "text.format.type")
        if found is not None:
            output_config["format"] = found
    if text_config.get("verbosity") not in (None, "medium"):
        ignored.append("text.verbosity")
    reasoning = optional(raw, "reasoning", "object") or {}
    summary = _summary(reasoning)
    thinking, effort = effort_of(reasoning.get("effort"), "reasoning.effort")
    if thinking is not None:
        body["thinking"] = thinking
    if effort is not None:
        output_config["effort"] = effort
    if output_config:
        body["output_config"] = output_config
    stream = optional(raw, "stream", "boolean") or False
    body["stream"] = stream
    store = raw.get("store", True) is not False
    include = raw.get("include") or []
    if not all(isinstance(x, str) for x in include):
        raise bad("include: expected a list of strings", "include")
    check_include(include)
    read = {"reasoning.encrypted_content"}
    if offered.web_search:
        read.add("web_search_call.action.sources")
    ignored += [f"include {x}" for x in include if x not in read]
    for name in raw:
        if name not in _KNOWN and name not in _ACCEPTED and raw[name] is not None:
            ignored.append(name)
    temperature, top_p = raw.get("temperature"), raw.get("top_p")
    echo = {
        "instructions": instructions,
        "max_output_tokens": raw.get("max_output_tokens"),
        "metadata": raw.get("metadata") or {},
        "parallel_tool_calls": raw.get("parallel_tool_calls", True),
        "previous_response_id": previous_id,
        "background": raw.get("background") is True,
        "reasoning": {"effort": reasoning.get("effort"), "summary": summary},
        "store": store,
        "temperature": 1.0 if temperature is None else float(temperature),
        "text": {"format": text_config.get("format") or {"type": "text"}},
        "tool_choice": raw.get("tool_choice") or "auto",
        "tools": offered.echoed,
        "top_p": 1.0 if top_p is None else float(top_p),
        "truncation": raw.get("truncation") or "disabled",
        "user": raw.get("user"),
    }
    paths = Paths(
        turns,
        system=system_paths,
        tools=offered.origins,
        fields={
            "messages": "input",
            "max_tokens": "max_output_tokens",
            "tool_choice.disable_parallel_tool_use": "parallel_tool_calls",
            "output_config.format": "text.format",
            "output_config.effort": "reasoning.effort",
            "thinking": "reasoning.effort",
        },
        words=(
            *RESPONSES_WORDS,
            *COMMON_WORDS,
            ("`max_tokens`", "`max_output_tokens`"),
            ("output_config.format", "text.format"),
        ),
        ids=ids,
    )
    return ResponsesRequest(
        body=body,
        model=model,
        echo=echo,
        stream=stream,
        store=store,
        previous_response_id=previous_id,
        new_system=new_system if previous is None else [],
        new_messages=new.messages,
        encrypted_reasoning="reasoning.encrypted_content" in include,
        namespaced=offered.namespaced,
        raw_input=raw["input"],
        summary=summary is not None,
        background=raw.get("background") is True,
        web_search=offered.web_search,
        search_sources="web_search_call.action.sources" in include,
        ignored=ignored,
        paths=paths,
    )
