"""Streaming tool call parsers: every format fed at every chunk boundary.

Each case is parsed whole, character by character, split in two at every
index, and at seeded random cut points; after merging adjacent Text /
Reasoning / CallArgs events the result must be the same and equal to the
expected events, which are built from the same pieces as the input text.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

import pytest

from missive.driver.parsing import (
    CallArgs,
    CallEnd,
    CallStart,
    MalformedToolCall,
    ParseEvent,
    Reasoning,
    Text,
    ToolParser,
)
from missive.kernel.plugins import Kernel
from missive.kernel.specs import ToolParserSpec, load_object
from missive.tools.parsers.harmony import HarmonyParser, parse_header
from missive.tools.parsers.hermes import HermesParser
from missive.tools.parsers.jsonscan import JsonScanner, JsonSyntaxError
from missive.tools.parsers.llama3 import Llama3JsonParser
from missive.tools.parsers.mistral import MistralParser, MistralV3Parser
from missive.tools.parsers.selection import select_parser

TOOLS = frozenset({"get_weather", "search", "f"})
ALL = (HermesParser, Llama3JsonParser, MistralParser, MistralV3Parser, HarmonyParser)

# Arguments with the awkward parts: unicode (emoji, CJK, \u escapes with a
# surrogate pair), nested objects/arrays, braces and tags inside strings.
ARGS_HARD = (
    '{"city": "東京 🌧️", "esc": "\\u00e9\\ud83d\\ude00\\n\\"q\\"", '
    '"note": "a } ] and </tool_call> [TOOL_CALLS] <|call|> {", '
    '"nested": {"list": [1, -2.5e-3, 0, true, false, null, {"k": [[], {}]}]}}'
)
ARGS_SIMPLE = '{"q": "x"}'


def call(name: str, args: str) -> list[ParseEvent]:
    return [CallStart(name), CallArgs(args), CallEnd()]


def merge(events: list[ParseEvent]) -> list[ParseEvent]:
    out: list[ParseEvent] = []
    for ev in events:
        if out and type(ev) is type(out[-1]) and isinstance(ev, (Text, Reasoning)):
            out[-1] = type(ev)(out[-1].text + ev.text)  # type: ignore[union-attr]
        elif out and isinstance(ev, CallArgs) and isinstance(out[-1], CallArgs):
            out[-1] = CallArgs(out[-1].partial_json + ev.partial_json)
        elif isinstance(ev, (Text, Reasoning, CallArgs)) and not (
            ev.text if not isinstance(ev, CallArgs) else ev.partial_json
        ):
            raise AssertionError(f"empty event {ev!r}")
        else:
            out.append(ev)
    return out


def parse(cls: type[ToolParser], pieces: list[str], **kw: bool) -> list[ParseEvent]:
    parser = cls(TOOLS, **kw)
    events: list[ParseEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return merge(events)


def splits(text: str, seed: int = 1234) -> Iterator[list[str]]:
    yield [text]
    yield list(text)
    for i in range(len(text) + 1):
        yield [text[:i], text[i:]]
    rng = random.Random(seed)
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(2, 12))))
        yield [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]


def assert_parses(cls: type[ToolParser], text: str, expected: list[ParseEvent], **kw: bool) -> None:
    for pieces in splits(text):
        assert parse(cls, pieces, **kw) == expected, pieces


def assert_strict_raises(cls: type[ToolParser], text: str) -> None:
    for pieces in ([text], list(text)):
        with pytest.raises(MalformedToolCall):
            parse(cls, pieces, strict=True)


def test_hard_arguments_are_valid_json() -> None:
    decoded = json.loads(ARGS_HARD)
    assert decoded["esc"] == "é😀\n\"q\"" and decoded["nested"]["list"][6] == {"k": [[], {}]}


# -- JSON scanner ----------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        ARGS_HARD,
        '{"a": -0.5E+10, "b": [1e5, 0.0], "c": "\\/\\b\\f\\r\\t"}',
        '{"a": 1, }',
        '{"a": 01}',
        '{"a": NaN}',
        '{"a": Infinity}',
        '{"a": tru}',
        '{"a": "x\ny"}',
        '{"a": "\\x"}',
        '{"a": "\\u12G4"}',
        '{"a" 1}',
        "{'a': 1}",
        '{"a": [1 2]}',
        '{"a": -}',
        '{"a": 1.}',
        '{"a": 1e}',
        '{"a": [}',
        '{"a": {]}',
        '{,}',
        "[1, 2]",
        "{}",
        ' \n{"a": [ ]}',
    ],
)
def test_scanner_agrees_with_json_loads(text: str) -> None:
    try:
        expected = isinstance(json.loads(text, parse_constant=lambda c: 1 / 0), dict)
    except (ValueError, ZeroDivisionError):
        expected = False
    scanner = JsonScanner("{")
    try:
        consumed = sum(scanner.feed(ch) for ch in text)
        ok = scanner.done and consumed == len(text)
    except JsonSyntaxError:
        ok = False
    assert ok == expected


def test_scanner_rejects_at_the_first_bad_character_and_stops_at_the_end() -> None:
    scanner = JsonScanner("{")
    with pytest.raises(JsonSyntaxError) as info:
        scanner.feed('{"a": [1, 2,]')
    assert info.value.pos == len('{"a": [1, 2,')
    scanner = JsonScanner("{")
    assert scanner.feed('{"a": {"b": "}"}} trailing') == len('{"a": {"b": "}"}}')
    assert scanner.done and scanner.depth == 0
    events = [(e.kind, e.level, e.key) for e in scanner.events]
    assert events == [
        ("start", 0, None),
        ("start", 1, "a"),
        ("start", 2, "b"),
        ("end", 2, "b"),
        ("end", 1, "a"),
        ("end", 0, None),
    ]


def test_scanner_decodes_escaped_keys() -> None:
    scanner = JsonScanner("{")
    scanner.feed('{"n\\u0061me": 1}')
    assert [e.key for e in scanner.events if e.level == 1] == ["name", "name"]


# -- Hermes ------------------------------------------------------------------


def hermes_call(name: str, args: str) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


@pytest.mark.parametrize("stream", [False, True])
def test_hermes_text_then_two_calls(stream: bool) -> None:
    text = (
        "Let me check 🌧️ <b>.\n"
        + hermes_call("get_weather", ARGS_HARD)
        + "\n"
        + hermes_call("search", ARGS_SIMPLE)
    )
    expected = [
        Text("Let me check 🌧️ <b>.\n"),
        *call("get_weather", ARGS_HARD),
        Text("\n"),
        *call("search", ARGS_SIMPLE),
    ]
    assert_parses(HermesParser, text, expected, stream_arguments=stream)


def test_hermes_text_after_a_call_stays_text() -> None:
    text = hermes_call("f", "{}") + "\nDone."
    assert_parses(HermesParser, text, [*call("f", "{}"), Text("\nDone.")])


def test_hermes_arguments_as_encoded_string_are_decoded() -> None:
    encoded = json.dumps(ARGS_HARD)
    assert_parses(HermesParser, hermes_call("get_weather", encoded), call("get_weather", ARGS_HARD))


@pytest.mark.parametrize("args", ['"[1, 2]"', '"not json"', "[1]", "null", '"{\\"a\\": NaN}"'])
def test_hermes_arguments_that_are_not_an_object_give_text(args: str) -> None:
    text = hermes_call("f", args)
    assert_parses(HermesParser, text, [Text(text)])
    assert_strict_raises(HermesParser, text)


def test_hermes_missing_arguments_mean_empty_input() -> None:
    assert_parses(HermesParser, '<tool_call>\n{"name": "f"}\n</tool_call>', call("f", "{}"))


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "get_weather", "arguments": {"city": Paris}}',
        '{"name": "get_weather", "arguments": {"city": "Paris"}',  # one brace short
        '{"name": "get_weather", "arguments": {"city": "Paris"},}',
        '{"name": "get_weather", "arguments": {"city": "Paris"}} extra',
        'get_weather({"city": "Paris"})',
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_hermes_malformed_call_is_given_back_as_text(body: str, stream: bool) -> None:
    text = "Before " + f"<tool_call>\n{body}\n</tool_call>" + " after"
    if stream:
        # With streaming the arguments may already be out: nothing can be retracted.
        for pieces in ([text], list(text)):
            try:
                events = parse(HermesParser, pieces, stream_arguments=True)
            except MalformedToolCall:
                continue
            assert events == [Text(text)]
        return
    assert_parses(HermesParser, text, [Text(text)])
    assert_strict_raises(HermesParser, text)


@pytest.mark.parametrize("stream", [False, True])
def test_hermes_unknown_tool_is_text(stream: bool) -> None:
    text = hermes_call("rm_rf", '{"path": "/"}') + hermes_call("f", "{}")
    expected = [Text(hermes_call("rm_rf", '{"path": "/"}')), *call("f", "{}")]
    assert_parses(HermesParser, text, expected, stream_arguments=stream)
    assert_strict_raises(HermesParser, hermes_call("rm_rf", "{}"))


def test_hermes_unfinished_call_is_text_and_strict_raises() -> None:
    text = 'Hi <tool_call>\n{"name": "f", "arguments": {"a": [1, '
    assert_parses(HermesParser, text, [Text(text)])
    assert_strict_raises(HermesParser, text)


def test_hermes_closing_tag_cut_by_end_of_generation() -> None:
    text = '<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_'
    assert_parses(HermesParser, text, call("f", '{"a": 1}'))


def test_hermes_holds_back_a_partial_tag_only() -> None:
    parser = HermesParser(TOOLS)
    assert merge(parser.feed("Hi <tool")) == [Text("Hi ")]
    assert merge(parser.feed("s> and <")) == [Text("<tools> and ")]
    assert merge(parser.feed("b>")) == [Text("<b>")]
    assert parser.finish() == []


# -- stream_arguments ----------------------------------------------------------


CALL_TEXTS = {
    HermesParser: hermes_call("get_weather", ARGS_HARD),
    Llama3JsonParser: '{"name": "get_weather", "parameters": ' + ARGS_HARD + "}",
    MistralParser: "[TOOL_CALLS]get_weather[ARGS]" + ARGS_HARD,
    MistralV3Parser: '[TOOL_CALLS] [{"name": "get_weather", "arguments": ' + ARGS_HARD + "}]",
    HarmonyParser: "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"
    + ARGS_HARD
    + "<|call|>",
}


@pytest.mark.parametrize("cls", ALL)
def test_stream_arguments_emits_fragments_before_the_call_completes(cls: type[ToolParser]) -> None:
    text = CALL_TEXTS[cls]
    args_end = text.index(ARGS_HARD) + len(ARGS_HARD) - 1  # index of the closing brace
    for stream in (True, False):
        parser = cls(TOOLS, stream_arguments=stream)
        events: list[ParseEvent] = []
        first_args_at = None
        for i, ch in enumerate(text):
            new = parser.feed(ch)
            if first_args_at is None and any(isinstance(e, CallArgs) for e in new):
                first_args_at = i
            events += new
        events += parser.finish()
        assert merge(events) == call("get_weather", ARGS_HARD)
        assert first_args_at is not None
        if stream:
            assert first_args_at < args_end
            fragments = [e for e in events if isinstance(e, CallArgs)]
            assert len(fragments) > 10
        else:
            assert first_args_at >= args_end


# -- Llama 3 -----------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_llama3_two_calls_with_python_tag(stream: bool) -> None:
    text = (
        ' \n<|python_tag|>{"name": "get_weather", "parameters": ' + ARGS_HARD + "}; "
        '{"name": "search", "arguments": ' + ARGS_SIMPLE + "}\n"
    )
    expected = [*call("get_weather", ARGS_HARD), *call("search", ARGS_SIMPLE)]
    assert_parses(Llama3JsonParser, text, expected, stream_arguments=stream)


def test_llama3_only_a_reply_starting_with_a_call_is_parsed() -> None:
    text = 'Sure: {"name": "f", "parameters": {}}'
    assert_parses(Llama3JsonParser, text, [Text(text)])
    assert_parses(Llama3JsonParser, "  <|python_ta", [Text("  <|python_ta")])
    assert_parses(Llama3JsonParser, "{not json", [Text("{not json")])


def test_llama3_text_after_calls() -> None:
    text = '{"name": "f", "parameters": {"a": 1}}\n\nThat is all.'
    assert_parses(Llama3JsonParser, text, [*call("f", '{"a": 1}'), Text("\n\nThat is all.")])


def test_llama3_parameters_as_encoded_string() -> None:
    text = '{"name": "get_weather", "parameters": ' + json.dumps(ARGS_HARD) + "}"
    assert_parses(Llama3JsonParser, text, call("get_weather", ARGS_HARD))


def test_llama3_malformed_and_unknown_calls_are_text() -> None:
    bad = '{"name": "f", "parameters": {"a": 1,}}'
    assert_parses(Llama3JsonParser, bad, [Text(bad)])
    assert_strict_raises(Llama3JsonParser, bad)
    unknown = '{"name": "rm", "parameters": {}}; {"name": "f", "parameters": {}}'
    assert_parses(Llama3JsonParser, unknown, [Text(unknown)])
    assert_strict_raises(Llama3JsonParser, unknown)
    # A second call that is malformed: the first stands, the rest is text.
    text = '{"name": "f", "parameters": {}}; {"name": "f", "parameters": {"a": }}'
    assert_parses(Llama3JsonParser, text, [*call("f", "{}"), Text('{"name": "f", "parameters": {"a": }}')])


# -- Mistral -----------------------------------------------------------------


@pytest.mark.parametrize("cls", [MistralParser, MistralV3Parser])
@pytest.mark.parametrize("stream", [False, True])
def test_mistral_v11_calls(cls: type[ToolParser], stream: bool) -> None:
    text = (
        "Checking [both].[TOOL_CALLS]get_weather[ARGS]"
        + ARGS_HARD
        + "[TOOL_CALLS]search[CALL_ID]a1B2c3D4e[ARGS]"
        + ARGS_SIMPLE
        + "[TOOL_CALLS]f{}"
    )
    expected = [
        Text("Checking [both]."),
        *call("get_weather", ARGS_HARD),
        *call("search", ARGS_SIMPLE),
        *call("f", "{}"),
    ]
    assert_parses(cls, text, expected, stream_arguments=stream)


@pytest.mark.parametrize("stream", [False, True])
def test_mistral_v3_array(stream: bool) -> None:
    text = (
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": ' + ARGS_HARD + ', "id": "a1B2c3D4e"}, '
        '{"arguments": ' + ARGS_SIMPLE + ', "name": "search"}]'
    )
    expected = [*call("get_weather", ARGS_HARD), *call("search", ARGS_SIMPLE)]
    assert_parses(MistralParser, text, expected, stream_arguments=stream)


def test_mistral_v3_array_is_all_or_nothing() -> None:
    text = '[TOOL_CALLS] [{"name": "f", "arguments": {}}, {"name": "rm", "arguments": {}}] ok'
    assert_parses(MistralParser, text, [Text(text)])
    assert_strict_raises(MistralParser, text)
    with pytest.raises(MalformedToolCall):  # the first call was already streamed
        parse(MistralParser, list(text), stream_arguments=True)


def test_mistral_malformed_v11_is_text() -> None:
    for text in (
        '[TOOL_CALLS]get_weather[ARGS]{"city": Paris} ok',
        "[TOOL_CALLS]get weather[ARGS]{}",
        "[TOOL_CALLS]rm[ARGS]{}",
        "[TOOL_CALLS]f[ARGS][1]",
        "[TOOL_CALLS]f[ARGS]{",
    ):
        assert_parses(MistralParser, text, [Text(text)])
        assert_strict_raises(MistralParser, text)


# -- harmony -----------------------------------------------------------------


HARMONY_CALL = "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>"


@pytest.mark.parametrize("stream", [False, True])
def test_harmony_reasoning_preamble_and_call(stream: bool) -> None:
    text = (
        "<|channel|>analysis<|message|>User wants weather in 東京. Use <tool>.<|end|>"
        "<|start|>assistant<|channel|>commentary<|message|>Checking {now}.<|end|>"
        + HARMONY_CALL
        + ARGS_HARD
        + "<|call|>"
    )
    expected = [
        Reasoning("User wants weather in 東京. Use <tool>."),
        Text("Checking {now}."),
        *call("get_weather", ARGS_HARD),
    ]
    assert_parses(HarmonyParser, text, expected, stream_arguments=stream)


def test_harmony_final_answer() -> None:
    text = (
        "<|channel|>analysis<|message|>Easy.<|end|>"
        "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4 <|x|>.<|return|>"
    )
    assert_parses(HarmonyParser, text, [Reasoning("Easy."), Text("2 + 2 = 4 <|x|>.")])


@pytest.mark.parametrize("stream", [False, True])
def test_harmony_recipient_in_role_and_call_token_not_rendered(stream: bool) -> None:
    # As the HF template renders history, and a backend that hides the <|call|> stop token.
    text = ' to=functions.search<|channel|>commentary json<|message|> {"q": "x"} '
    assert_parses(HarmonyParser, text, call("search", ARGS_SIMPLE), stream_arguments=stream)


def test_harmony_calls_to_tools_not_offered_and_malformed_calls_are_text() -> None:
    """A function not offered and malformed JSON come back as text; a call
    to a built-in tool (python) is dropped: it is neither a call the client
    can run nor answer text (llama.cpp's gpt-oss parser drops it too)."""
    python = "<|channel|>analysis to=python code<|message|>print(1)<|call|>"
    assert_parses(HarmonyParser, python, [])
    assert_parses(
        HarmonyParser, "Hi" + python + "<|start|>assistant<|channel|>final<|message|>ok", [Text("Hiok")]
    )
    unknown = "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}<|call|>"
    assert_parses(HarmonyParser, unknown, [Text(unknown)])
    bad = HARMONY_CALL + '{"city": "Paris"' + "<|call|>"
    assert_parses(HarmonyParser, bad, [Text(bad)])
    for text in (python, unknown, bad):
        assert_strict_raises(HarmonyParser, text)


def test_harmony_plain_text_without_headers() -> None:
    assert_parses(HarmonyParser, " toast is ready", [Text(" toast is ready")])


def test_harmony_header_parts() -> None:
    assert parse_header("assistant<|channel|>commentary to=functions.f <|constrain|>json") == (
        "assistant",
        "commentary",
        "functions.f",
    )
    assert parse_header(" to=functions.f<|channel|>commentary json") == ("", "commentary", "functions.f")
    assert parse_header("<|channel|>final") == ("", "final", None)


# -- call_syntax round trip ------------------------------------------------------


@pytest.mark.parametrize("cls", ALL)
@pytest.mark.parametrize("stream", [False, True])
def test_call_syntax_round_trip(cls: type[ToolParser], stream: bool) -> None:
    calls = [("get_weather", ARGS_HARD), ("search", ARGS_SIMPLE), ("f", "{}")]
    text = cls.call_separator.join(
        prefix + args + suffix for name, args in calls for prefix, suffix in [cls.call_syntax(name)]
    )
    merged = [ev for name, args in calls for ev in call(name, args)]
    got = parse(cls, list(text), stream_arguments=stream)
    # A separator that is not part of the syntax (Hermes' newline) comes back as text.
    assert [ev for ev in got if not (isinstance(ev, Text) and ev.text == cls.call_separator)] == merged
    assert parse(cls, [text], strict=True, stream_arguments=stream) == got


# -- selection and registration ------------------------------------------------------

QWEN25_TEMPLATE = """\
{{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\\n<tool_call>\\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {{- tool_call.arguments | tojson }}
            {{- '}\\n</tool_call>' }}
        {%- endfor %}
"""  # noqa: E501 - template lines kept whole: a line break would be rendered

LLAMA31_TEMPLATE = """\
{{- "<|start_header_id|>system<|end_header_id|>\\n\\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\\n\\n" }}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|python_tag|>' + tool_call.name + '.call(' }}
        {%- else  %}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
"""  # noqa: E501 - template lines kept whole: a line break would be rendered

LLAMA32_TEMPLATE = """\
{%- if tools is not none %}
    {{- "Environment: ipython\\n" }}
{%- endif %}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
"""

MISTRAL_V3_TEMPLATE = """\
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {{- ', "id": "' + tool_call.id + '"}' }}
"""

MISTRAL_V13_TEMPLATE = """\
                {%- if arguments is not string %}
                    {%- set arguments = arguments|tojson|safe %}
                {%- endif %}
                {{- '[TOOL_CALLS]' + tool['function']['name'] + '[ARGS]' + arguments }}
"""

GPT_OSS_TEMPLATE = """\
            {{- "<|start|>assistant to=" }}
            {{- "functions." + tool_call.name + "<|channel|>commentary " }}
            {{- (tool_call.content_type if tool_call.content_type is defined else "json") + "<|message|>" }}
            {{- tool_call.arguments|tojson }}
            {{- "<|call|>" }}
"""

CHATML_TEMPLATE = """\
{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}
"""  # noqa: E501 - template lines kept whole: a line break would be rendered


@pytest.fixture(scope="module")
def registered() -> dict[str, ToolParserSpec]:
    return Kernel(load_entry_points=False).tool_parsers


@pytest.mark.parametrize(
    ("template", "expected"),
    [
        (QWEN25_TEMPLATE, "hermes"),
        (LLAMA31_TEMPLATE, "llama3"),
        (LLAMA32_TEMPLATE, "llama3"),
        (MISTRAL_V3_TEMPLATE, "mistral_v3"),
        (MISTRAL_V13_TEMPLATE, "mistral"),
        (GPT_OSS_TEMPLATE, "harmony"),
        (CHATML_TEMPLATE, None),
    ],
)
def test_select_parser_from_real_templates(
    registered: dict[str, ToolParserSpec], template: str, expected: str | None
) -> None:
    assert select_parser(template, registered) == expected


def test_plugin_parsers_take_part_in_selection(registered: dict[str, ToolParserSpec]) -> None:
    plugin = ToolParserSpec("xml", "some.module:XmlParser", template_markers=("<function=",))
    specs = [*registered.values(), plugin]
    assert select_parser("{{- '<function=' + name + '>' }}", specs) == "xml"
    # Registration order decides between two matching specs.
    assert select_parser(QWEN25_TEMPLATE, [plugin, *registered.values()]) == "hermes"
    first = ToolParserSpec("mine", "some.module:Mine", template_markers=("<tool_call>",))
    assert select_parser(QWEN25_TEMPLATE, [first, *registered.values()]) == "mine"


def test_registered_factories_are_the_parsers(registered: dict[str, ToolParserSpec]) -> None:
    assert list(registered) == [
        "seed_oss",
        "minimax_m2",
        "qwen3_xml",
        "glm45",
        "kimi_k2",
        "kimi_k3",
        "deepseek_v41",
        "deepseek_v4",
        "deepseek_v32",
        "deepseek_v31",
        "gemma4",
        "nemotron",
        "granite",
        "llama4_pythonic",
        "hermes",
        "llama3",
        "mistral_v3",
        "mistral",
        "harmony",
    ]
    for name, spec in registered.items():
        cls = load_object(spec.factory)
        assert issubclass(cls, ToolParser) and cls.name == name
        assert spec.description and spec.template_markers


def test_handles_reasoning_is_declared_and_set_by_formats_that_mark_reasoning(
    registered: dict[str, ToolParserSpec],
) -> None:
    """The core runs no reasoning parser in front of a tool parser that
    separates reasoning itself: the flag is part of the interface, and the
    parsers that emit :class:`Reasoning` set it."""
    assert ToolParser.handles_reasoning is False
    analysis = "<|channel|>analysis<|message|>Think.<|end|>"
    for name, spec in registered.items():
        cls = load_object(spec.factory)
        emits = any(isinstance(e, Reasoning) for e in parse(cls, [analysis]))
        assert cls.handles_reasoning is emits, name
    assert HarmonyParser.handles_reasoning is True


def test_harmony_text_quoting_call_markup_stays_text() -> None:
    """Why the flag matters: a final answer (or preamble) that quotes harmony
    markup is text. A reasoning parser in front would strip the headers and
    hand the quote to this parser as if it were the model's own markup."""
    quoted = "<|channel|>commentary to=functions.search <|constrain|>json<|message|>" + ARGS_SIMPLE
    text = (
        "<|channel|>analysis<|message|>Explain.<|end|><|start|>assistant<|channel|>final<|message|>Write "
        + quoted
    )
    for stream in (False, True):
        assert_parses(
            HarmonyParser, text, [Reasoning("Explain."), Text("Write " + quoted)], stream_arguments=stream
        )


def test_a_template_rendering_calls_without_a_tool_list_selects_its_format(
    registered: dict[str, ToolParserSpec],
) -> None:
    """DeepSeek-V3.1's template renders past calls but never mentions a tool
    list: its markers select its parser (not Hermes), and the tools are
    declared in the system prompt in the format's own words."""
    from missive.testing.toolcall_templates import TEMPLATES
    from missive.tools.parsers.selection import parser_for_template
    from missive.tools.render import system_prompt_format, template_supports_tools

    for model in ("deepseek-ai/DeepSeek-V3.1", "deepseek-ai/DeepSeek-V3-0324"):
        template = TEMPLATES[model]
        assert not template_supports_tools(template)
        assert parser_for_template(template, registered) == "deepseek_v31"
        fmt = system_prompt_format(template)
        assert fmt is not None and fmt.name == "deepseek_v31"
    assert system_prompt_format(CHATML_TEMPLATE) is None  # no calls rendered: the Hermes convention
    assert parser_for_template(CHATML_TEMPLATE, registered) == "hermes"
    assert system_prompt_format(QWEN25_TEMPLATE) is None  # takes a tool list: native


def test_a_call_cut_by_max_tokens_is_dropped_unless_constrained() -> None:
    """``finish_cut``: free generation cut inside a call drops the call (its
    markup is not text, and the model never finished it); a constrained
    parser keeps a call whose closing tag alone was cut (the grammar wrote
    its structure; it was streamed already)."""
    whole = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}'
    free = HermesParser(TOOLS)
    events = free.feed("Sure. " + whole) + free.finish_cut()
    assert events == [Text("Sure. ")]
    forced = HermesParser(TOOLS, stream_arguments=True, strict=True)
    events = forced.feed(whole) + forced.finish_cut()
    assert merge(events) == call("get_weather", '{"city": "Paris"}')
