"""Mid-conversation ``tool_addition`` / ``tool_removal`` blocks, through the SDK, in process.

The blocks stand in ``role: "system"`` messages (the beta tool runner's
``add_tools()``/``remove_tools()``, Claude Code's
``mid-conversation-tool-changes-2026-07-01``). An added tool is offered from
its block on (callable, forceable, counted, its definition in the prompt
where the block stands); a removed one is no longer offered; the prompt
before a change is unchanged; what cannot apply is a 400
(:mod:`missive.tools.changes`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest
from anthropic.lib.tools import beta_tool

from missive.testing import InProcessApp, generation_request, in_process_app
from missive_echo import script

TOOLS = {"tool_choice": ["auto", "any", "tool", "none"]}
CONFIG: dict[str, Any] = {
    "models": {
        "report": {
            "driver": "echo",
            "context_window": 4000,
            "settings": {"report": True, "capabilities": TOOLS},
        },
        "hermes": {
            "driver": "echo",
            "context_window": 4000,
            "settings": {"tool_parser": "hermes", "capabilities": TOOLS},
        },
    }
}

READ = {
    "name": "read_file",
    "description": "Read a file of the project.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
GREP = {
    "name": "grep",
    "description": "Search file contents with a regular expression.",
    "input_schema": {
        "type": "object",
        "properties": {"pattern": {"type": "string"}},
        "required": ["pattern"],
    },
}
QUESTION = {"role": "user", "content": "Where is the word tide used in this project?"}
ANSWER = {"role": "assistant", "content": "Let me look."}
ADD_GREP = {
    "role": "system",
    "content": [{"type": "tool_addition", "tool": {"type": "tool_definition", "definition": GREP}}],
}
REMOVE_READ = {
    "role": "system",
    "content": [{"type": "tool_removal", "tool": {"type": "tool_reference", "name": "read_file"}}],
}
GREP_CALL = '<tool_call>\n{"name": "grep", "arguments": {"pattern": "tide"}}\n</tool_call>'


#: The runner's turns (``settings.script_file``): matched on the last user turn's tool results.
RUNNER_SCRIPTS = [
    {"match": "no tide here", "script": [{"text": GREP_CALL}]},
    {"match": "docs/tide.md", "script": [{"text": "Found it."}]},
]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessApp]:
    scripts = tmp_path_factory.mktemp("runner") / "scripts.json"
    scripts.write_text(json.dumps(RUNNER_SCRIPTS))
    runner = {"tool_parser": "hermes", "capabilities": TOOLS, "script_file": str(scripts)}
    config = {
        "models": {
            **CONFIG["models"],
            "runner": {"driver": "echo", "context_window": 4000, "settings": runner},
        }
    }
    with in_process_app(config) as app:
        yield app


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> anthropic.Anthropic:
    return app.sdk()


def then(call: str) -> list[dict[str, Any]]:
    """A user turn after a change, then a turn whose script makes the model
    write ``call`` (a system message joins the user turn it follows, so the
    script has a turn of its own)."""
    return [
        {"role": "user", "content": "go on"},
        {"role": "assistant", "content": "Searching."},
        {"role": "user", "content": script({"text": call})},
    ]


def seen(client: anthropic.Anthropic, messages: list[Any], **fields: Any) -> dict[str, Any]:
    """The conversation the echo driver received (``settings.report``)."""
    msg = client.messages.create(model="report", max_tokens=5, messages=messages, **fields)
    return json.loads(msg.content[0].text)  # type: ignore[union-attr]


def test_added_tool_is_called_when_forced(client: anthropic.Anthropic) -> None:
    """After an addition, ``tool_choice`` may force the added tool, the
    model's call of it is parsed against the offered tools, and nothing is
    reported as ignored."""
    raw = client.messages.with_raw_response.create(
        model="hermes",
        max_tokens=50,
        tools=[READ],
        tool_choice={"type": "tool", "name": "grep"},
        messages=[QUESTION, ANSWER, ADD_GREP, *then(GREP_CALL)],
    )
    msg = raw.parse()
    assert [(b.type, getattr(b, "name", None)) for b in msg.content] == [("tool_use", "grep")]
    assert msg.content[0].input == {"pattern": "tide"}  # type: ignore[union-attr]
    assert "tool_addition" not in raw.headers.get("missive-ignored", "")


def test_added_tool_definition_stands_where_it_was_added(client: anthropic.Anthropic) -> None:
    report = seen(client, [QUESTION, ANSWER, ADD_GREP, {"role": "user", "content": "go on"}], tools=[READ])
    assert report["system"] is None
    assert [t["role"] for t in report["turns"]] == ["user", "assistant", "user"]
    note = report["turns"][2]["blocks"][0]["text"]
    assert note.startswith("<system_message>\n<tools>\n") and note.endswith("\n</tools>\n</system_message>")
    definition = json.loads(
        note.removeprefix("<system_message>\n<tools>\n").removesuffix("\n</tools>\n</system_message>")
    )
    assert definition == {
        "type": "function",
        "function": {"name": "grep", "description": GREP["description"], "parameters": GREP["input_schema"]},
    }


def test_count_tokens_grows_with_an_addition_and_keeps_the_prefix(client: anthropic.Anthropic) -> None:
    before = [QUESTION, ANSWER, {"role": "user", "content": "go on"}]
    after = [QUESTION, ANSWER, ADD_GREP, {"role": "user", "content": "go on"}]
    plain = client.messages.count_tokens(model="report", tools=[READ], messages=before).input_tokens
    added = client.messages.count_tokens(model="report", tools=[READ], messages=after).input_tokens
    assert added > plain
    # The prompt before the addition is the one without it, token for token.
    without, withit = seen(client, before, tools=[READ]), seen(client, after, tools=[READ])
    assert withit["turns"][:2] == without["turns"][:2] and withit["system"] == without["system"]
    assert withit["turns"][2]["blocks"][1:] == without["turns"][2]["blocks"]


def test_removal_withdraws_the_tool(client: anthropic.Anthropic) -> None:
    history = [QUESTION, ANSWER, REMOVE_READ, {"role": "user", "content": "go on"}]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model="hermes",
            max_tokens=5,
            tools=[READ, GREP],
            tool_choice={"type": "tool", "name": "read_file"},
            messages=history,
        )
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith(
        "tool_choice.name: tool 'read_file' was removed by the tool_removal at messages.2.content.0"
    )
    report = seen(client, history, tools=[READ, GREP])
    note = report["turns"][2]["blocks"][0]["text"]
    assert "Tool removed: read_file" in note
    # Without the removal, the same choice is valid.
    client.messages.create(
        model="hermes",
        max_tokens=5,
        tools=[READ, GREP],
        tool_choice={"type": "tool", "name": "read_file"},
        messages=[QUESTION, ANSWER, {"role": "user", "content": "go on"}],
    )


def test_removed_tool_stays_listed_and_is_not_offered() -> None:
    """What a driver is handed: the removed tool is no longer in ``tools``
    (a remote backend is not sent it; parsers and grammars do not accept
    it), the added one is; the top list a renderer shows is the one before
    any change, so the prompt before the change is unchanged."""
    request = generation_request(
        [QUESTION, ANSWER, REMOVE_READ, ADD_GREP, {"role": "user", "content": "go on"}], tools=[READ]
    )
    assert [t.name for t in request.tools] == ["grep"]
    assert [t.name for t in request.prompt_tools()] == ["read_file"]
    plain = generation_request([QUESTION], tools=[READ])
    assert plain.prompt_tools() == request.prompt_tools()


def test_tool_use_of_a_removed_tool_stays_valid_history(client: anthropic.Anthropic) -> None:
    history = [
        QUESTION,
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "tide"}]},
        REMOVE_READ,
        {"role": "user", "content": "go on"},
    ]
    msg = client.messages.create(model="hermes", max_tokens=50, tools=[READ], messages=history)
    assert msg.stop_reason == "end_turn" and msg.content[0].type == "text"


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "grep"}},
            "messages.2.content.0.tool.name: tool_removal names the tool 'grep', which is not available "
            "at messages.2",
        ),
        (
            {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "nope"}},
            "messages.2.content.0.tool.name: tool_addition names the tool 'nope', which is not defined",
        ),
        (
            {"type": "tool_addition", "tool": {"type": "mcp_toolset_reference", "server_name": "s"}},
            'messages.2.content.0.tool.type: "mcp_toolset_reference" refers to an MCP server',
        ),
        (
            {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": {"name": "x"}}},
            "messages.2.content.0.tool.definition: input_schema: Field required",
        ),
        (
            {"type": "tool_removal", "tool": {"type": "tool_reference", "name": 5}},
            "messages.2.content.0.tool.name: Input should be a non-empty string (the tool's name)",
        ),
        (
            {"type": "tool_removal", "tool": {"type": "tool_reference"}},
            "messages.2.content.0.tool.name: Field required",
        ),
    ],
)
def test_changes_that_cannot_apply_are_400(
    client: anthropic.Anthropic, block: dict[str, Any], expected: str
) -> None:
    history = [QUESTION, ANSWER, {"role": "system", "content": [block]}, {"role": "user", "content": "go on"}]
    with pytest.raises(anthropic.BadRequestError) as created:
        client.messages.create(model="report", max_tokens=5, tools=[READ], messages=history)
    with pytest.raises(anthropic.BadRequestError) as counted:
        client.messages.count_tokens(model="report", tools=[READ], messages=history)
    for caught in (created, counted):
        assert caught.value.body["error"]["message"].startswith(expected)  # type: ignore[index]


def test_removal_of_a_tool_removed_before_is_400(client: anthropic.Anthropic) -> None:
    history = [
        QUESTION,
        ANSWER,
        REMOVE_READ,
        {"role": "user", "content": "go on"},
        REMOVE_READ,
        {"role": "user", "content": "more"},
    ]
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="report", max_tokens=5, tools=[READ], messages=history)
    assert caught.value.body["error"]["message"].startswith(  # type: ignore[index]
        "messages.4.content.0.tool.name: tool_removal names the tool 'read_file'"
    )


def test_deferred_tool_is_added_by_reference(client: anthropic.Anthropic) -> None:
    """A ``tools`` entry with ``defer_loading: true`` is withheld until a
    ``tool_addition`` names it; then it is callable and its definition
    stands there."""
    tools = [READ, {**GREP, "defer_loading": True}]
    add = {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "grep"}}],
    }
    with pytest.raises(anthropic.BadRequestError):
        client.messages.create(
            model="hermes",
            max_tokens=5,
            tools=tools,
            tool_choice={"type": "tool", "name": "grep"},
            messages=[QUESTION],
        )
    msg = client.messages.create(
        model="hermes",
        max_tokens=50,
        tools=tools,
        tool_choice={"type": "tool", "name": "grep"},
        messages=[QUESTION, ANSWER, add, *then(GREP_CALL)],
    )
    assert [getattr(b, "name", None) for b in msg.content] == ["grep"]


def test_tool_runner_add_and_remove_tools(app: InProcessApp) -> None:
    """The SDK's beta tool runner: ``add_tools()`` sends a ``tool_addition``
    with the next request, and the model can call the tool at once;
    ``remove_tools()`` sends a ``tool_removal``, after which forcing the tool
    is refused."""
    calls: list[str] = []

    @beta_tool
    def read_file(path: str) -> str:
        """Read a file of the project."""
        calls.append(f"read_file {path}")
        return "no tide here"

    @beta_tool
    def grep(pattern: str) -> str:
        """Search file contents with a regular expression."""
        calls.append(f"grep {pattern}")
        return "docs/tide.md: tide"

    bodies: list[dict[str, Any]] = []
    ignored: list[str] = []

    def note(response: Any) -> None:
        bodies.append(json.loads(response.request.content))
        ignored.append(response.headers.get("missive-ignored", ""))

    http = app.http_client(event_hooks={"response": [note]})
    client = anthropic.Anthropic(base_url=app.url, http_client=http, api_key="unused", max_retries=0)
    first = '<tool_call>\n{"name": "read_file", "arguments": {"path": "a"}}\n</tool_call>'
    runner = client.beta.messages.tool_runner(
        model="runner",
        max_tokens=50,
        tools=[read_file],
        messages=[{"role": "user", "content": script({"text": first})}],
        betas=["inline-tools-2026-09-15"],
    )
    replies = []
    for reply in runner:
        replies.append(reply)
        if len(replies) == 1:  # read_file called: grep joins for the next turn
            runner.add_tools(grep)
        elif len(replies) == 2:  # grep called: read_file leaves
            runner.remove_tools(read_file)
    assert calls == ["read_file a", "grep tide"]
    assert replies[-1].content[0].text == "Found it."  # type: ignore[union-attr]
    changes = [
        [b["type"] for m in body["messages"] if m["role"] == "system" for b in m["content"]]
        for body in bodies
    ]
    assert changes == [[], ["tool_addition"], ["tool_removal"]]  # a thread continue sends the new messages
    assert not any("tool_addition" in i or "tool_removal" in i for i in ignored), ignored
