"""The tool-call formats of issue 27, per family (:mod:`tool_families`):

* the family's chat template selects its parser;
* a conversation with parallel calls, their results and a later turn is
  rendered through the family's template, and the history's calls read back
  from the rendered prompt, with the family's parser, as the same calls
  (the model sees its past calls in its own syntax);
* end to end on a live server: a tiny random-weight GGUF of the family
  (its llama.cpp architecture, its special tokens in the vocabulary, its
  template) answers a forced
  ``tool_choice: any`` through the SDK, streamed and not; the grammar makes
  the random model write a call in the family's syntax, the driver renders
  the special tokens as text, the parser reads the call, and the SDK gets a
  ``tool_use`` whose input validates against the tool's schema.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import jsonschema
import pytest
from tool_families import FAMILIES, Family

from missive.kernel.plugins import Kernel
from missive.messages.templating import render_prompt
from missive.testing import generation_request, live_server
from missive.tools.parsers.base import CallArgs, CallStart
from missive.tools.parsers.registry import build_parser
from missive.tools.parsers.selection import parser_for_template
from missive.tools.render import template_messages

pytest.importorskip("gguf")
from missive_llamacpp.testing_gguf import write_tiny_gguf  # noqa: E402 - needs gguf

WEATHER = {
    "name": "get_weather",
    "description": "Weather of a city.",
    "input_schema": {
        "type": "object",
        "properties": {
            "city": {"type": "string", "enum": ["Paris", "Lyon"]},
            # an enum: llama-cpp-python's converter does not enforce minimum/maximum
            "days": {"type": "integer", "enum": [1, 3, 7]},
            "metric": {"type": "boolean"},
        },
        "required": ["city", "days", "metric"],
    },
}
WRITE = {
    "name": "write_file",
    "description": "Write a file.",
    "input_schema": {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "content": {"type": "string"},
            "mode": {"type": "integer"},
        },
        "required": ["path", "content"],
    },
}
HISTORY_CALLS = [
    ("toolu_01", "get_weather", {"city": "Paris", "days": 3, "metric": True}),
    (
        "toolu_02",
        "write_file",
        {"path": "/tmp/a b.py", "content": 'if a < b:\n    print("x, y")\n', "mode": 420},
    ),
]


def conversation() -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Weather in Paris, and save a script."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Doing both."},
                *({"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in HISTORY_CALLS),
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "sunny, 21 C"},
                {"type": "tool_result", "tool_use_id": "toolu_02", "content": "written"},
            ],
        },
        {"role": "assistant", "content": "It is sunny; the script is saved."},
        {"role": "user", "content": "And Lyon?"},
    ]


@pytest.fixture(scope="module")
def specs() -> Any:
    return Kernel(load_entry_points=False).tool_parsers


@pytest.mark.parametrize("family", FAMILIES.values(), ids=list(FAMILIES))
def test_the_template_selects_the_family_parser(family: Family, specs: Any) -> None:
    assert parser_for_template(family.template, specs) == family.parser


@pytest.mark.parametrize("family", FAMILIES.values(), ids=list(FAMILIES))
def test_past_calls_are_rendered_in_the_family_syntax(family: Family, specs: Any) -> None:
    request = generation_request(conversation(), tools=[WEATHER, WRITE], max_tokens=64)
    messages, extra = template_messages(request, family.template)
    if family.tool_list:
        assert "tools" in extra  # offered natively, through the family's template
    else:
        # Declared in the system prompt in the family's own words; history native.
        assert extra == {} and messages[0]["role"] == "system"
        assert (
            "### get_weather" in messages[0]["content"] and "<｜tool▁calls▁begin｜>" in messages[0]["content"]
        )
    prompt = render_prompt(family.template, messages, **extra)
    # The history's calls, read back from the prompt by the family's parser.
    parser = build_parser(specs, family.parser, request.tools, constrained=False)
    found: list[tuple[str, Any]] = []
    pieces = [prompt]
    if family.parser == "llama4_pythonic":
        # Calls are read only at the start of a reply (the format allows no
        # text with calls; the history's "Doing both." is rendered before them).
        turns = [
            turn.split("<|eot|>")[0]
            for turn in prompt.split("<|header_start|>assistant<|header_end|>\n\n")[1:]
        ]
        pieces = [turn[turn.find("[") :] for turn in turns if "[" in turn]
    for piece in pieces:
        events = parser.feed(piece) + parser.finish()
        for event in events:
            if isinstance(event, CallStart):
                found.append((event.name, ""))
            elif isinstance(event, CallArgs):
                found[-1] = (found[-1][0], found[-1][1] + event.partial_json)
    assert [(name, json.loads(args)) for name, args in found] == [(n, a) for _, n, a in HISTORY_CALLS], prompt
    assert "sunny, 21 C" in prompt and "It is sunny" in prompt and "And Lyon?" in prompt


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    folder = tmp_path_factory.mktemp("tiny-families")
    models = {}
    for family in FAMILIES.values():
        if family.arch is None:
            continue
        path = write_tiny_gguf(
            folder / f"{family.name}.gguf",
            arch=family.arch,
            chat_template=family.template,
            special_tokens=family.specials,
            eos=family.eos,
            name=family.name,
        )
        models[family.name] = {
            "driver": "llamacpp",
            "context_window": 4096,  # byte-level tokens: a history of calls is long
            "settings": {"model_path": str(path), "n_threads": 1, "seed": 7, "parallel": 1},
        }
    with live_server({"models": models}) as url:
        yield anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)


def _check(message: Any) -> dict[str, Any]:
    assert message.stop_reason == "tool_use", message
    calls = [b for b in message.content if b.type == "tool_use"]
    assert [c.name for c in calls] == ["get_weather"], message
    jsonschema.validate(calls[0].input, WEATHER["input_schema"])
    return dict(calls[0].input)


SERVED = {name: f for name, f in FAMILIES.items() if f.arch is not None}


@pytest.mark.parametrize("family", SERVED.values(), ids=list(SERVED))
def test_a_forced_call_in_the_family_syntax_end_to_end(family: Family, server: anthropic.Anthropic) -> None:
    """``any`` (one tool offered: its enum, bounded integer and boolean keep
    the random model's call short) streamed and not, then ``tool`` naming
    it after a history of calls and results in the family's syntax."""
    body: dict[str, Any] = {
        "model": family.name,
        "max_tokens": 600,
        "extra_body": {"temperature": 0},  # this SDK no longer takes it as an argument
        "tools": [WEATHER],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
        "messages": [{"role": "user", "content": "Weather in Lyon?"}],
    }
    whole = _check(server.messages.create(**body))
    with server.messages.stream(**body) as stream:
        streamed = _check(stream.get_final_message())
    assert streamed == whole  # one path for both, and temperature 0
    named = {
        **body,
        "tools": [WEATHER, WRITE],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        "messages": conversation(),
    }
    assert set(_check(server.messages.create(**named))) == {"city", "days", "metric"}
