"""Forced tool calls and structured output on MLX (issue 43 item 4): the
core's Lark grammars (:mod:`missive.tools.lark_grammar`) compiled by
llguidance for SmolLM2's tokenizer, then served through the SDK.

The grammar tests feed llguidance's matcher the tokens of a call written the
way each registered format writes it: every format's call is accepted and
its parser reads the same arguments back; what the schema or the format
forbids is refused. The served tests run the real SmolLM2-135M (converted to
MLX) with ``tool_choice`` ``any``/``tool`` and ``output_config.format``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.api import ToolChoice, ToolDefinition, ToolParser, parser_class
from missive.default_plugins.tool_parsers import register_tool_parsers
from missive.testing import live_server
from missive.tools.lark_grammar import json_schema_lark, tool_call_lark
from missive.tools.parsers.base import CallArgs, CallStart
from missive.tools.parsers.hermes import HermesParser

llguidance = pytest.importorskip("llguidance")

SPECS = {s.name: s for s in register_tool_parsers()}
WRITE = ToolDefinition(
    "Write",
    "",
    {
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "count": {"type": "integer"},
            "content": {"type": "string"},
        },
        "required": ["file_path", "count", "content"],
    },
)
CODE = "if a < b:\n    print('<tag>', \"]]>\")  # </parameter> and </function>, then </tool_call>"
ANY = ToolChoice(mode="any", parallel=False)


@pytest.fixture(scope="module")
def tokenizers(mlx_model_dir: Path) -> tuple[Any, Any]:
    """SmolLM2's Hugging Face tokenizer and llguidance's view of it."""
    import llguidance.hf
    import transformers

    hf = transformers.AutoTokenizer.from_pretrained(str(mlx_model_dir))
    return hf, llguidance.hf.from_tokenizer(hf)


def accepts(tokenizers: tuple[Any, Any], lark: str, text: str | list[int]) -> bool:
    """Whether the grammar takes every token of ``text`` and is then complete."""
    hf, llt = tokenizers
    grammar = llguidance.LLMatcher.grammar_from_lark(lark)
    failed, messages = llguidance.LLMatcher.validate_grammar_with_warnings(grammar, llt)
    assert not failed, messages
    matcher = llguidance.LLMatcher(llt, grammar, log_level=0)
    tokens = text if isinstance(text, list) else hf.encode(text, add_special_tokens=False)
    return bool(matcher.consume_tokens(tokens)) and matcher.is_accepting()


def written(parser: type[ToolParser], values: dict[str, Any]) -> str:
    """One call as the format writes it (its call and parameter syntax)."""
    prefix, suffix = parser.call_syntax("Write")
    if parser.arguments_format != "parameters":
        return prefix + json.dumps(values) + suffix
    parts = []
    for key, value in values.items():
        raw = isinstance(value, str) and parser.raw_string_values
        before, after = parser.parameter_syntax(key, raw)
        parts.append(before + (value if raw else json.dumps(value)) + after)
    return prefix + (parser.parameter_separator or "").join(parts) + suffix


def read_back(parser: type[ToolParser], text: str) -> list[dict[str, Any]]:
    """The arguments of each call the parser reads from ``text``, fed a character at a time."""
    schemas = {"Write": WRITE.input_schema}
    p = parser(frozenset({"Write"}), stream_arguments=True, strict=True, schemas=schemas)
    events = [e for ch in text for e in p.feed(ch)] + p.finish()
    calls: list[str] = []
    for event in events:
        if isinstance(event, CallStart):
            calls.append("")
        elif isinstance(event, CallArgs):
            calls[-1] += event.partial_json
    return [json.loads(c) for c in calls]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_format_writes_calls_its_parser_reads_back(tokenizers: tuple[Any, Any], name: str) -> None:
    parser = parser_class(SPECS, name)
    values = {"file_path": "src/app.py", "count": 3, "content": CODE}
    one = written(parser, values)
    assert accepts(tokenizers, tool_call_lark(parser, (WRITE,), ANY, {}), one)
    assert read_back(parser, one) == [values]
    two = one + parser.call_separator + written(parser, {**values, "count": 4})
    parallel = tool_call_lark(parser, (WRITE,), ToolChoice(mode="any", parallel=True), {})
    assert accepts(tokenizers, parallel, two)
    assert not accepts(tokenizers, tool_call_lark(parser, (WRITE,), ANY, {}), two)  # one call only
    assert read_back(parser, two) == [values, {**values, "count": 4}]


@pytest.mark.parametrize("name", sorted(SPECS))
def test_arguments_outside_the_schema_are_refused(tokenizers: tuple[Any, Any], name: str) -> None:
    parser = parser_class(SPECS, name)
    lark = tool_call_lark(parser, (WRITE,), ANY, {})
    good = {"file_path": "a.py", "count": 3, "content": "x"}
    assert accepts(tokenizers, lark, written(parser, good))
    assert not accepts(tokenizers, lark, written(parser, {**good, "count": "three"}))
    assert not accepts(tokenizers, lark, written(parser, {"file_path": "a.py", "count": 3}))  # required
    if parser.arguments_format != "parameters":
        # No property a tool does not declare (additionalProperties false by default, as llama.cpp's).
        assert not accepts(tokenizers, lark, written(parser, {**good, "mode": "w"}))


@pytest.mark.parametrize(
    "name", sorted(n for n in SPECS if parser_class(SPECS, n).arguments_format == "parameters")
)
def test_what_would_end_a_raw_value_is_refused(tokenizers: tuple[Any, Any], name: str) -> None:
    """Each sequence the parser would read as the end of a value or call is
    refused inside a raw string value; code holding ``<`` and other closing
    tags is not."""
    parser = parser_class(SPECS, name)
    if not parser.raw_string_values or not parser.value_forbids():
        pytest.skip("strings are JSON in this format")
    lark = tool_call_lark(parser, (WRITE,), ANY, {})
    for parts in parser.value_forbids():
        code = "x = 1\n" + "\n".join(parts) + "\ny"
        assert not accepts(tokenizers, lark, written(parser, {"file_path": "a", "count": 1, "content": code}))


def test_special_tokens_are_written_as_tokens(tokenizers: tuple[Any, Any]) -> None:
    """A call syntax holding a special token of the tokenizer matches that
    token, never its text spelled in ordinary tokens."""
    hf, _ = tokenizers
    special = "<|im_start|>"
    token = hf.convert_tokens_to_ids(special)

    class Marked(HermesParser):
        @classmethod
        def call_syntax(cls, name: str) -> tuple[str, str]:
            return f"{special}call {json.dumps(name)} ", special

    lark = tool_call_lark(Marked, (WRITE,), ANY, {special: token})
    assert f"<[{token}]>" in lark
    args = json.dumps({"file_path": "a", "count": 1, "content": "b"})
    body = hf.encode(f'call "Write" {args}', add_special_tokens=False)
    assert accepts(tokenizers, lark, [token, *body, token])
    spelled = hf.encode(special, add_special_tokens=False, split_special_tokens=True)
    assert token not in spelled
    assert not accepts(tokenizers, lark, [*spelled, *body, *spelled])


def test_structured_output_grammar(tokenizers: tuple[Any, Any]) -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}
    lark = json_schema_lark(schema)
    assert accepts(tokenizers, lark, '{"name": "Ada"}')
    assert not accepts(tokenizers, lark, '{"name": 1}')
    assert not accepts(tokenizers, lark, '{"name": "Ada", "age": 3}')


# -- served: SmolLM2 on MLX through the SDK -----------------------------------

MODEL = "smollm2-mlx"
GREEDY = {"temperature": 0}
WEATHER = {
    "name": "get_weather",
    "description": "Get the weather in a city for some days",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
        "required": ["city", "days"],
    },
}
ASK = [{"role": "user", "content": "Weather in Paris for 3 days?"}]


@pytest.fixture(scope="module")
def client(mlx_model_dir: Path) -> Iterator[anthropic.Anthropic]:
    config = {
        "models": {
            MODEL: {"driver": "mlx", "context_window": 2048, "settings": {"model_path": str(mlx_model_dir)}}
        }
    }
    with live_server(config) as url:
        yield anthropic.Anthropic(base_url=url, api_key="test", max_retries=0)


def test_forced_call_is_a_schema_valid_call(client: anthropic.Anthropic) -> None:
    """``any`` (one call) and ``tool`` give a call of the tool whose input the
    schema accepts; the stream's accumulated input equals the reply's."""
    import jsonschema

    reply = client.messages.create(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body=GREEDY,
    )
    calls = [b for b in reply.content if b.type == "tool_use"]
    assert reply.stop_reason == "tool_use" and len(calls) == 1, reply.content
    assert calls[0].name == "get_weather"
    jsonschema.validate(calls[0].input, WEATHER["input_schema"])
    with client.messages.stream(
        model=MODEL,
        max_tokens=60,
        tools=[WEATHER],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body=GREEDY,
    ) as stream:
        streamed = stream.get_final_message()
    (call,) = [b for b in streamed.content if b.type == "tool_use"]
    assert streamed.stop_reason == "tool_use" and call.input == calls[0].input


def test_structured_output_is_valid_json(client: anthropic.Anthropic) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days"],
        "additionalProperties": False,
    }
    reply = client.messages.create(
        model=MODEL,
        max_tokens=40,
        messages=ASK,
        extra_body={**GREEDY, "output_config": {"format": {"type": "json_schema", "schema": schema}}},
    )
    assert reply.stop_reason == "end_turn", reply.content
    value = json.loads("".join(b.text for b in reply.content if b.type == "text"))
    assert set(value) == {"city", "days"} and isinstance(value["days"], int)


def test_strict_schema_llguidance_cannot_compile_is_a_400(client: anthropic.Anthropic) -> None:
    tool = {**WEATHER, "strict": True}
    tool["input_schema"] = {**WEATHER["input_schema"], "not": {"required": ["x"]}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(
            model=MODEL, max_tokens=20, tools=[tool], tool_choice={"type": "any"}, messages=ASK
        )
    message = caught.value.body["error"]["message"]
    assert "strict tool's input_schema" in message and "not" in message, message


def test_non_strict_schema_llguidance_cannot_compile_is_still_answered(client: anthropic.Anthropic) -> None:
    """A lookaround pattern (no regex engine of a grammar library has it)
    in a non-strict tool: the call is still forced, any JSON object."""
    tool = {**WEATHER}
    tool["input_schema"] = {
        "type": "object",
        "properties": {"city": {"type": "string", "pattern": "(?=P)\\w+"}},
        "required": ["city"],
    }
    reply = client.messages.create(
        model=MODEL,
        max_tokens=60,
        tools=[tool],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
        messages=ASK,
        extra_body=GREEDY,
    )
    assert reply.stop_reason == "tool_use" and [b.type for b in reply.content] == ["tool_use"]


def test_what_llguidance_leaves_out_of_structured_output_is_reported(client: anthropic.Anthropic) -> None:
    """The keywords llguidance does not implement (``uniqueItems``, ``not``)
    are in ``missive-ignored`` under the field the request used; a schema it
    cannot compile (a lookaround) is reported whole, with llguidance's
    reason; a schema it holds whole is not reported."""
    loose = {
        "type": "object",
        "properties": {"tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True}},
        "not": {"required": ["x"]},
    }
    fmt = {"type": "json_schema", "schema": loose}
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=1, messages=ASK, extra_body={"output_config": {"format": fmt}}
    )
    assert raw.headers["missive-ignored"] == (
        "output_config.format not (not enforced by the llguidance grammar), "
        "output_config.format uniqueItems (not enforced by the llguidance grammar)"
    )
    raw = client.messages.with_raw_response.create(
        model=MODEL, max_tokens=1, messages=ASK, extra_body={"output_format": fmt}
    )
    assert raw.headers["missive-ignored"].startswith("output_format not (")
    lookaround = {"type": "object", "properties": {"c": {"type": "string", "pattern": "(?=P)\\w+"}}}
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=1,
        messages=ASK,
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": lookaround}}},
    )
    ignored = raw.headers["missive-ignored"]
    assert ignored.startswith("output_config.format (not enforced by the llguidance grammar, any JSON object")
    assert ignored.endswith(
        "regex parse error: look-around, including look-ahead and look-behind, is not supported)"
    )
    exact = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    raw = client.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=1,
        messages=ASK,
        extra_body={"output_config": {"format": {"type": "json_schema", "schema": exact}}},
    )
    assert "missive-ignored" not in raw.headers


@pytest.mark.anyio
async def test_thinking_budget_with_structured_output_is_a_400(mlx_model_dir: Path) -> None:
    """A reasoning model (here SmolLM2 read with the ``think`` reasoning
    format) cannot both think with a budget and have its whole reply
    constrained (a forced call with thinking is already the API's 400)."""
    from missive.config import ModelEntry
    from missive.protocol.errors import InvalidRequestError
    from missive.testing import generation_request
    from missive_mlx.driver import MlxDriver

    settings = {"model_path": str(mlx_model_dir), "reasoning_parser": "think"}
    driver = MlxDriver("m", ModelEntry(driver="mlx", context_window=2048, settings=settings))
    await driver.start()
    try:
        request = generation_request(
            ASK,
            model="m",
            max_tokens=2048,
            driver=driver,
            output_config={"format": {"type": "json_schema", "schema": {"type": "object"}}},
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
        with pytest.raises(InvalidRequestError, match="cannot be combined with a constrained output"):
            driver.constraint(request)
        free = generation_request(ASK, model="m", max_tokens=2048, driver=driver, tools=[WEATHER])
        assert driver.constraint(free) is None
    finally:
        await driver.aclose()
