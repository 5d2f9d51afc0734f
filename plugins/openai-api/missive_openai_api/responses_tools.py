"""A Responses request's ``tools`` as Messages tools (:mod:`.responses_request`
translates the rest of the request).

The tool types are OpenAI's (the ``openai`` SDK 3.57.0's ``ToolParam``):

* ``function`` (``name``, ``description``, ``parameters``, ``strict``): a
  Messages tool;
* ``namespace`` (``NamespaceToolParam``: "Groups function/custom tools under
  a shared namespace", with ``name``, ``description`` and ``tools``, its
  function and custom tools): each function inside is offered to the model
  as one Messages tool named :func:`flat_name` (``crm__lookup`` for the
  function ``lookup`` of the namespace ``crm``), its description preceded
  by the namespace's. OpenAI's ``function_call`` output item names such a
  call by ``name`` and ``namespace`` (``ResponseFunctionToolCall.namespace``,
  "The namespace of the function to run"): :attr:`Tools.namespaced` maps the
  flat name the model calls back to the two, and a ``function_call`` input
  item with a ``namespace`` is sent as the flat name (:mod:`.responses_items`).
  A custom (free-form) tool in a namespace is left out and reported, as a
  namespace as a whole was before Missive offered its functions;
* ``web_search`` (and its dated and preview versions, :data:`HOSTED`), which
  OpenAI runs itself: where the operator turned on Missive's web search,
  offered as that server tool (:mod:`.responses_search`; one, a second is
  reported); elsewhere left out, the model answers without it, reported in
  ``missive-ignored``;
* any other type (the other hosted tools, ``file_search``,
  ``code_interpreter``..., and ``custom``, ``shell``...): a 400 naming it.

Each Messages tool keeps its origin in the request (``tools[2].tools[0]``)
for the core's errors (:class:`.errors.Paths`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .common import bad, checked, function_tool, optional, report_unknown
from .responses_search import search_tool
from .turns import Origin

__all__ = ["HOSTED", "Tools", "flat_name", "tools_of"]

#: OpenAI's web search tool (``WebSearchToolParam``, ``WebSearchPreviewToolParam``):
#: left out and reported (Codex sends it with every request).
HOSTED = frozenset(
    {"web_search", "web_search_preview", "web_search_2025_08_26", "web_search_preview_2025_03_11"}
)
_TOOL_ORIGIN = {"input_schema": "parameters"}
_NAMESPACE_FIELDS = frozenset({"type", "name", "description", "tools"})
#: Between a namespace and its function's name in the Messages tool's name.
SEPARATOR = "__"


def flat_name(namespace: str, name: str) -> str:
    """The Messages tool name of the function ``name`` of ``namespace``."""
    return f"{namespace}{SEPARATOR}{name}"


@dataclass
class Tools:
    """The translation of ``tools``.

    Attributes:
        tools: the Messages tools.
        origins: each one's origin in the request.
        echoed: the tools as the response object repeats them.
        namespaced: a Messages tool name -> ``(namespace, name)`` of the
            namespaced function it offers.
        web_search: a ``web_search`` tool is offered as the server tool.
    """

    tools: list[dict[str, Any]] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    echoed: list[dict[str, Any]] = field(default_factory=list)
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    web_search: bool = False

    def choice(self, choice: dict[str, Any]) -> dict[str, Any]:
        """``choice``, a Messages ``tool_choice``, naming a namespaced
        function by its flat name when it names it by its own (OpenAI's
        ``ToolChoiceFunctionParam`` has only ``name``) and no other tool has it."""
        name = choice.get("name")
        if choice["type"] != "tool" or any(t["name"] == name for t in self.tools):
            return choice
        flat = [f for f, (_, inner) in self.namespaced.items() if inner == name]
        return {**choice, "name": flat[0]} if len(flat) == 1 else choice

    def add(
        self, spec: dict[str, Any], where: str, ignored: list[str], name: str | None = None
    ) -> dict[str, Any]:
        """Add the function tool ``spec`` (at ``where``), offered as ``name``
        when given; the function as the response object repeats it."""
        out = function_tool(spec, where, ignored, frozenset({"type"}))
        shown = out["name"]
        if name is not None:
            out["name"] = name
        pairs = zip(self.tools, self.origins, strict=True)
        taken = next((o.path for t, o in pairs if t["name"] == out["name"]), None)
        if taken is not None:
            message = f"{where}.name: the tool name {out['name']!r} is also the name of {taken}"
            raise bad(message, f"{where}.name")
        self.tools.append(out)
        self.origins.append(Origin(where, _TOOL_ORIGIN, frozenset({"input_schema"})))
        return {
            "type": "function",
            "name": shown,
            "description": spec.get("description"),
            "parameters": out["input_schema"],
            "strict": spec.get("strict", True),
        }


def _namespace(tool: dict[str, Any], where: str, found: Tools, ignored: list[str]) -> None:
    namespace = checked(tool.get("name"), "string", f"{where}.name")
    about = optional(tool, "description", "string", f"{where}.description") or ""
    report_unknown(tool, _NAMESPACE_FIELDS, where, ignored)
    echoed: list[dict[str, Any]] = []
    for j, inner in enumerate(checked(tool.get("tools"), "list", f"{where}.tools")):
        at = f"{where}.tools[{j}]"
        kind = inner.get("type") if isinstance(inner, dict) else None
        if not isinstance(inner, dict) or kind != "function":
            ignored.append(f"{at} ({kind})")
            continue
        name = checked(inner.get("name"), "string", f"{at}.name")
        described = inner
        if about:
            text = optional(inner, "description", "string", f"{at}.description")
            described = {**inner, "description": f"{about}\n\n{text}" if text else about}
        shown = found.add(described, at, ignored, flat_name(namespace, name))
        found.namespaced[flat_name(namespace, name)] = (namespace, name)
        echoed.append(shown | {"description": inner.get("description")})
    found.echoed.append({"type": "namespace", "name": namespace, "description": about, "tools": echoed})


def tools_of(raw: Any, ignored: list[str], *, web_search: bool = False) -> Tools:
    """The :class:`Tools` of the request's ``tools``; ``web_search``: the
    server runs web search (a ``web_search`` tool is offered as it).

    Raises:
        OpenAIRequestError: a tool of a type Missive does not serve, a
            field of a wrong type, two tools offered under one name.
    """
    found = Tools()
    for i, tool in enumerate(checked(raw, "list", "tools")):
        kind = tool.get("type") if isinstance(tool, dict) else None
        where = f"tools[{i}]"
        if kind in HOSTED and web_search and isinstance(tool, dict) and not found.web_search:
            found.tools.append(search_tool(tool, where, ignored))
            found.origins.append(Origin(where))
            found.echoed.append(tool)
            found.web_search = True
        elif kind in HOSTED:
            ignored.append(f"{where} ({kind})")
        elif isinstance(tool, dict) and kind == "namespace":
            _namespace(tool, where, found, ignored)
        elif isinstance(tool, dict) and kind == "function":
            found.echoed.append(found.add(tool, where, ignored))
        else:
            raise bad(
                f"{where}.type: tool type {kind!r} is not supported; function and namespace tools are",
                f"{where}.type",
            )
    return found
