"""``POST /v1/responses`` tools through the official ``openai`` SDK on the
scripted ``echo`` driver: ``namespace`` tools (their functions offered as
``<namespace>__<name>``, calls named back by ``namespace`` and ``name``),
and the hosted tools left out or refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import openai

CRM = {
    "type": "namespace",
    "name": "crm",
    "description": "The customer database.",
    "tools": [
        {
            "type": "function",
            "name": "lookup",
            "description": "Find a customer.",
            "parameters": {"type": "object", "properties": {"who": {"type": "string"}}, "required": ["who"]},
        },
        {"type": "custom", "name": "free_text"},
    ],
}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def script(*steps: dict[str, Any], **extra: Any) -> str:
    return json.dumps({"script": list(steps), **extra})


def _call(name: str, arguments: str) -> dict[str, Any]:
    return {"tool_call": {"name": name, "arguments": [arguments]}}


def test_namespaced_call_comes_back_named_by_namespace(client: openai.OpenAI, raw: httpx.Client) -> None:
    content = script(_call("crm__lookup", '{"who": "Ada"}'), stop_reason="tool_use")
    done = client.responses.create(model="echo-tools", input=content, tools=[WEATHER, CRM])  # type: ignore[list-item]
    (call,) = done.output
    assert call.type == "function_call" and (call.namespace, call.name) == ("crm", "lookup")
    assert json.loads(call.arguments) == {"who": "Ada"}
    # The response repeats the namespace as sent, its function tools in it.
    assert [t.type for t in done.tools] == ["function", "namespace"]
    namespace = done.tools[1]
    assert namespace.type == "namespace" and namespace.name == "crm"
    assert [t.name for t in namespace.tools] == ["lookup"]
    assert namespace.tools[0].description == "Find a customer."  # type: ignore[union-attr]
    # Streamed: the added and done items name it the same way.
    events = list(
        client.responses.create(model="echo-tools", input=content, tools=[CRM], stream=True)  # type: ignore[list-item]
    )
    items = [e.item for e in events if e.type in ("response.output_item.added", "response.output_item.done")]
    assert [(i.namespace, i.name) for i in items] == [("crm", "lookup")] * 2  # type: ignore[union-attr]
    # The custom tool inside it is left out, and said so.
    response = raw.post("/v1/responses", json={"model": "echo-tools", "input": "x", "tools": [CRM]})
    assert response.status_code == 200, response.text
    assert "tools[0].tools[1] (custom)" in response.headers["missive-ignored"]
    assert "namespace" not in response.headers["missive-ignored"]


def test_namespaced_call_sent_back_and_continued(client: openai.OpenAI) -> None:
    """The call item with its namespace goes back as input (stateless, as
    Codex sends it) and after previous_response_id; the model sees a call of
    the tool it was offered, and its result."""
    then = [{"script": [{"text": "Ada is a customer."}]}]
    content = script(_call("crm__lookup", '{"who": "Ada"}'), stop_reason="tool_use", then=then)
    first = client.responses.create(model="echo-tools", input=content, tools=[CRM])  # type: ignore[list-item]
    (call,) = first.output
    output = {"type": "function_call_output", "call_id": call.call_id, "output": "found"}
    again = client.responses.create(
        model="echo-tools",
        previous_response_id=first.id,
        input=[output],
        tools=[CRM],  # type: ignore[list-item]
    )
    assert again.output_text == "Ada is a customer."
    sent = call.model_dump(exclude_none=True)
    assert sent["namespace"] == "crm"
    seen = client.responses.create(
        model="echo-report",
        input=[{"role": "user", "content": "who?"}, sent, output],
        tools=[CRM],  # type: ignore[list-item]
        store=False,
    )
    (assistant,) = [t for t in json.loads(seen.output_text)["turns"] if t["role"] == "assistant"]
    assert assistant["blocks"][0]["name"] == "crm__lookup"


def test_namespaced_tool_choice_and_errors(
    client: openai.OpenAI, refused: Callable[..., openai.BadRequestError]
) -> None:
    """A named tool_choice of a namespaced function by its own name forces it;
    the core's errors on a namespaced function name it in the namespace."""
    content = script(_call("crm__lookup", '{"who": "Bo"}'), stop_reason="tool_use")
    done = client.responses.create(
        model="echo-strict",
        input=content,
        tools=[CRM],  # type: ignore[list-item]
        tool_choice={"type": "function", "name": "lookup"},
    )
    assert done.output[0].type == "function_call" and done.output[0].namespace == "crm"
    broken = {**CRM, "tools": [{"type": "function", "name": "f", "parameters": {"type": "string"}}]}
    error = refused(client.responses.create, model="echo-tools", input="x", tools=[WEATHER, broken])
    assert error.param == "tools[1].tools[0].parameters.type"
    clash = {"type": "function", "name": "crm__lookup"}
    error = refused(client.responses.create, model="echo-tools", input="x", tools=[clash, CRM])
    assert error.param == "tools[1].tools[0].name" and "tools[0]" in error.message


def test_hosted_tools(client: openai.OpenAI, raw: httpx.Client, refused: Callable[..., Any]) -> None:
    """web_search is left out and reported; other hosted tools are refused naming their type."""
    body = {"model": "echo-tools", "input": "x", "tools": [{"type": "web_search"}, WEATHER]}
    response = raw.post("/v1/responses", json=body)
    assert response.status_code == 200 and "tools[0] (web_search)" in response.headers["missive-ignored"]
    for kind in ("file_search", "code_interpreter", "image_generation", "computer_use_preview"):
        error = refused(client.responses.create, model="echo", input="x", tools=[{"type": kind}])
        assert error.param == "tools[0].type" and kind in error.message
