"""The tool call formats of Qwen3-Coder, Seed-OSS, MiniMax-M2, GLM-4.5,
DeepSeek-V3.1/V3.2, Kimi-K2, Gemma 4, Nemotron and Llama 4 (issue 27):
recorded outputs in each family's syntax parsed at every split point.

Each output is written the way the family's chat template renders past
calls (the templates are in ``plugins/llamacpp/tests/tool_families.py``),
with the awkward parts: text before and after, parallel calls, values that
need the tool's schema to be typed (``"3"`` is an integer for ``days``, a
string for ``city``), multi-line values holding ``<`` and quotes, calls to
tools not offered, and generations cut inside a call.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_tool_parsers import merge, splits

from missive.driver.parsing import (
    CallArgs,
    CallEnd,
    CallStart,
    MalformedToolCall,
    ParseEvent,
    Text,
    ToolParser,
)
from missive.tools.parsers.gemma4 import Gemma4Parser, parse_gemma_value
from missive.tools.parsers.pythonic import Llama4PythonicParser
from missive.tools.parsers.raw_values import RawValueLanguage
from missive.tools.parsers.sections import DeepSeekV31Parser, GraniteParser, KimiK2Parser, NemotronParser
from missive.tools.parsers.values import typed_value
from missive.tools.parsers.xml import (
    DeepSeekV4Parser,
    DeepSeekV32Parser,
    DeepSeekV41Parser,
    Glm45Parser,
    MiniMaxM2Parser,
    QwenXmlParser,
    SeedOssParser,
)
from missive.tools.parsers.xtml import KimiK3Parser

SCHEMAS: dict[str, dict[str, Any]] = {
    "get_weather": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "days": {"type": "integer"},
            "units": {"type": ["string", "null"]},
            "detailed": {"type": "boolean"},
        },
        "required": ["city"],
    },
    "Edit": {
        "type": "object",
        "properties": {
            "file_path": {"type": "string"},
            "old_string": {"type": "string"},
            "new_string": {"type": "string"},
            "replace_all": {"type": "boolean"},
            "ranges": {"type": "array", "items": {"type": "integer"}},
        },
        "required": ["file_path", "old_string", "new_string"],
    },
}
TOOLS = frozenset(SCHEMAS)

WEATHER = {"city": "Paris", "days": 3, "units": None, "detailed": True}
EDIT = {
    "file_path": "/src/app.py",
    "old_string": 'if a < b:\n    print("x")',
    "new_string": "if a <= b:\n    print('y')\n",
    "replace_all": False,
    "ranges": [1, 2],
}


def call(name: str, args: dict[str, Any]) -> list[ParseEvent]:
    return [CallStart(name), CallArgs(json.dumps(args, ensure_ascii=False)), CallEnd()]


def parse(cls: type[ToolParser], pieces: list[str], **kw: Any) -> list[ParseEvent]:
    parser = cls(TOOLS, schemas=SCHEMAS, **kw)
    events: list[ParseEvent] = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    # Whitespace between calls is not content (the pipeline drops it).
    return [e for e in merge(events) if not (isinstance(e, Text) and not e.text.strip())]


def assert_parses(cls: type[ToolParser], text: str, expected: list[ParseEvent], **kw: Any) -> None:
    for pieces in splits(text):
        assert parse(cls, pieces, **kw) == expected, pieces
    for pieces in ([text], list(text)):
        assert parse(cls, pieces, strict=True, stream_arguments=True) == expected, pieces


# -- recorded outputs, per family -------------------------------------------------------


def qwen_call(name: str, args: dict[str, Any], tag: str = "tool_call") -> str:
    params = "".join(
        f"<parameter={k}>\n{v if isinstance(v, str) else json.dumps(v)}\n</parameter>\n"
        for k, v in args.items()
    )
    return f"<{tag}>\n<function={name}>\n{params}</function>\n</{tag}>"


def seed_call(name: str, args: dict[str, Any]) -> str:
    params = "".join(
        f"<parameter={k}>{v if isinstance(v, str) else json.dumps(v)}</parameter>\n" for k, v in args.items()
    )
    return f"<seed:tool_call>\n<function={name}>\n{params}</function>\n</seed:tool_call>"


def minimax_block(*calls: tuple[str, dict[str, Any]]) -> str:
    invokes = "".join(
        f'<invoke name="{name}">\n'
        + "".join(
            f'<parameter name="{k}">{v if isinstance(v, str) else json.dumps(v)}</parameter>\n'
            for k, v in args.items()
        )
        + "</invoke>\n"
        for name, args in calls
    )
    return f"<minimax:tool_call>\n{invokes}</minimax:tool_call>"


def glm_call(name: str, args: dict[str, Any], newline: str = "\n") -> str:
    pairs = "".join(
        f"<arg_key>{k}</arg_key>{newline}<arg_value>{v if isinstance(v, str) else json.dumps(v)}"
        f"</arg_value>{newline}"
        for k, v in args.items()
    )
    return f"<tool_call>{name}{newline}{pairs}</tool_call>"


def dsml_block(*calls: tuple[str, dict[str, Any]], block: str = "function_calls", d: str = "｜DSML｜") -> str:
    invokes = "".join(
        f'\n<{d}invoke name="{name}">\n'
        + "\n".join(
            f'<{d}parameter name="{k}" string="{"true" if isinstance(v, str) else "false"}">'
            f"{v if isinstance(v, str) else json.dumps(v)}</{d}parameter>"
            for k, v in args.items()
        )
        + f"\n</{d}invoke>"
        for name, args in calls
    )
    return f"<{d}{block}>{invokes}\n</{d}{block}>"


def xtml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return "number"
    return "string" if isinstance(value, str) else "object" if isinstance(value, dict) else "array"


def kimi_k3_tools(*calls: tuple[str, dict[str, Any]]) -> str:
    """Kimi-K3's tools element (its template's render_assistant)."""
    body = "".join(
        f'<|open|>call tool="{name}" index="{i + 1}"<|sep|>'
        + "".join(
            f'<|open|>argument key="{k}" type="{xtml_type(v)}"'
            f'<|sep|>{v if isinstance(v, str) else json.dumps(v)}'
            "<|close|>argument<|sep|>"
            for k, v in args.items()
        )
        + "<|close|>call<|sep|>"
        for i, (name, args) in enumerate(calls)
    )
    return f"<|open|>tools<|sep|>{body}<|close|>tools<|sep|>"


def granite_calls(*calls: tuple[str, dict[str, Any]]) -> str:
    return "<|tool_call|>" + json.dumps([{"name": n, "arguments": a} for n, a in calls])


def kimi_block(*calls: tuple[str, dict[str, Any]]) -> str:
    body = "".join(
        f"<|tool_call_begin|>functions.{name}:{i}<|tool_call_argument_begin|>{json.dumps(args)}<|tool_call_end|>"
        for i, (name, args) in enumerate(calls)
    )
    return f"<|tool_calls_section_begin|>{body}<|tool_calls_section_end|>"


def deepseek_block(*calls: tuple[str, dict[str, Any]]) -> str:
    body = "".join(
        f"<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>{json.dumps(args)}<｜tool▁call▁end｜>"
        for name, args in calls
    )
    return f"<｜tool▁calls▁begin｜>{body}<｜tool▁calls▁end｜>"


def gemma_value(value: Any) -> str:
    if isinstance(value, str):
        return f'<|"|>{value}<|"|>'
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_value(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v) for v in value) + "]"
    return json.dumps(value)


def gemma_call(name: str, args: dict[str, Any]) -> str:
    return f"<|tool_call>call:{name}{gemma_value(args)}<tool_call|>"


def nemotron_block(*calls: tuple[str, dict[str, Any]]) -> str:
    return "<TOOLCALL>" + json.dumps([{"name": n, "arguments": a} for n, a in calls]) + "</TOOLCALL>"


def pythonic_list(*calls: tuple[str, dict[str, Any]]) -> str:
    return (
        "[" + ", ".join(f"{n}(" + ", ".join(f"{k}={v!r}" for k, v in a.items()) + ")" for n, a in calls) + "]"
    )


def sorted_args(args: dict[str, Any]) -> dict[str, Any]:
    return dict(sorted(args.items()))


#: Each family: parser, a writer of several calls in one answer, and whether
#: the writer sorts keys (Gemma's template does).
FAMILIES: dict[str, tuple[type[ToolParser], Any]] = {
    "qwen3_xml": (QwenXmlParser, lambda *calls: "\n".join(qwen_call(n, a) for n, a in calls)),
    "seed_oss": (SeedOssParser, lambda *calls: "\n".join(seed_call(n, a) for n, a in calls)),
    "minimax_m2": (MiniMaxM2Parser, minimax_block),
    "glm45": (Glm45Parser, lambda *calls: "\n".join(glm_call(n, a) for n, a in calls)),
    "glm47": (Glm45Parser, lambda *calls: "".join(glm_call(n, a, newline="") for n, a in calls)),
    "deepseek_v32": (DeepSeekV32Parser, dsml_block),
    "deepseek_v4": (DeepSeekV4Parser, lambda *calls: dsml_block(*calls, block="tool_calls")),
    "deepseek_v41": (DeepSeekV41Parser, lambda *calls: dsml_block(*calls, block="calls", d="｜DSML｜ ")),
    "kimi_k3": (KimiK3Parser, kimi_k3_tools),
    "granite": (GraniteParser, granite_calls),
    "kimi_k2": (KimiK2Parser, kimi_block),
    "deepseek_v31": (DeepSeekV31Parser, deepseek_block),
    "gemma4": (Gemma4Parser, lambda *calls: "".join(gemma_call(n, a) for n, a in calls)),
    "nemotron": (NemotronParser, nemotron_block),
    "llama4_pythonic": (Llama4PythonicParser, pythonic_list),
}
TEXT_BEFORE = {"llama4_pythonic": ""}  # pythonic replies are calls only


@pytest.mark.parametrize("family", FAMILIES)
def test_text_then_parallel_calls_then_text(family: str) -> None:
    cls, write = FAMILIES[family]
    before = TEXT_BEFORE.get(family, "I'll check both. ")
    text = before + write(("get_weather", WEATHER), ("Edit", EDIT)) + "\nDone."
    weather, edit = (sorted_args(WEATHER), sorted_args(EDIT)) if family == "gemma4" else (WEATHER, EDIT)
    expected = (
        ([Text(before)] if before else [])
        + call("get_weather", weather)
        + call("Edit", edit)
        + [Text("\nDone.")]
    )
    for pieces in splits(text):
        assert parse(cls, pieces) == expected, pieces
    assert parse(cls, list(text), strict=True, stream_arguments=True) == expected


@pytest.mark.parametrize("family", FAMILIES)
def test_a_call_to_a_tool_not_offered_is_text(family: str) -> None:
    cls, write = FAMILIES[family]
    raw = write(("delete_everything", {"city": "Paris"}))
    got = parse(cls, list(raw))
    assert got == [Text(raw)] or (
        got and all(isinstance(e, Text) for e in got) and "".join(e.text for e in got) == raw
    )  # type: ignore[union-attr]
    with pytest.raises(MalformedToolCall):
        parse(cls, [raw], strict=True)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_generation_cut_inside_a_call_keeps_the_complete_calls(family: str) -> None:
    """``max_tokens`` inside the second call: the first is kept, the cut one
    is given back as text (never completed), or raises when constrained."""
    cls, write = FAMILIES[family]
    whole = write(("get_weather", WEATHER), ("Edit", EDIT))
    cut = whole[: whole.index("print('y')")]
    got = parse(cls, list(cut))
    if family in ("nemotron", "llama4_pythonic", "granite"):
        # One array for all calls: all or nothing.
        assert got == [Text(cut)]
    else:
        assert got[:3] == call("get_weather", sorted_args(WEATHER) if family == "gemma4" else WEATHER)
        given_back = "".join(e.text for e in got[3:] if isinstance(e, Text))
        assert len(got) == 4 and given_back.strip() and cut.endswith(given_back)
    with pytest.raises(MalformedToolCall):
        parse(cls, [cut], strict=True)


@pytest.mark.parametrize(
    ("family", "closing"),
    [
        ("qwen3_xml", "\n</function>\n</tool_call>"),
        ("glm45", "</tool_call>"),
        ("minimax_m2", "</minimax:tool_call>"),
        ("kimi_k2", "<|tool_calls_section_end|>"),
        ("deepseek_v31", "<｜tool▁calls▁end｜>"),
        ("gemma4", "<tool_call|>"),
    ],
)
def test_closing_markers_cut_off_by_the_end_of_the_generation(family: str, closing: str) -> None:
    """A backend stopping on a call's closing token: the call is complete."""
    cls, write = FAMILIES[family]
    text = write(("get_weather", {"city": "Paris"}))
    assert text.endswith(closing.lstrip("\n"))
    for keep in range(len(closing) + 1):
        cut = text[: len(text) - len(closing) + keep] if keep < len(closing) else text
        assert parse(cls, list(cut)) == call("get_weather", {"city": "Paris"}), cut


def test_qwen_without_the_tool_call_tag() -> None:
    """Qwen3-Coder sometimes starts at ``<function=``."""
    body = qwen_call("get_weather", {"city": "Lyon"})[len("<tool_call>\n") : -len("\n</tool_call>")]
    assert_parses(QwenXmlParser, "Sure. " + body, [Text("Sure. "), *call("get_weather", {"city": "Lyon"})])


def test_values_are_typed_from_the_schema() -> None:
    props = SCHEMAS["get_weather"]["properties"]
    assert typed_value("3", props["days"]) == 3
    assert typed_value("3", props["city"]) == "3"
    assert typed_value("null", props["units"]) is None
    assert typed_value("metric", props["units"]) == "metric"
    assert typed_value("True", props["detailed"]) is True  # a Python literal
    assert typed_value("maybe", props["detailed"]) == "maybe"  # left for the schema check to name
    assert typed_value("[1, 2]", {"type": "array"}) == [1, 2]
    assert typed_value("{'a': 1}", {"type": "object"}) == {"a": 1}
    assert typed_value("2.5", {"type": "number"}) == 2.5
    assert typed_value("x", None) == "x"
    assert typed_value(" 7 ", {"anyOf": [{"type": "integer"}, {"type": "null"}]}) == 7
    ref_root = {"$defs": {"n": {"type": "integer"}}, "properties": {"k": {"$ref": "#/$defs/n"}}}
    assert typed_value("5", {"$ref": "#/$defs/n"}, ref_root) == 5


def test_a_string_value_keeps_its_text_but_qwen_s_newlines() -> None:
    args = {"file_path": "a", "old_string": "\n  indented\n\n", "new_string": "x"}
    text = qwen_call("Edit", args)
    assert_parses(QwenXmlParser, text, call("Edit", args))


def test_unexpected_text_inside_a_call_is_malformed() -> None:
    raw = (
        "<tool_call>\n<function=get_weather>\nhello\n<parameter=city>\nParis\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    assert all(isinstance(e, Text) for e in parse(QwenXmlParser, [raw]))


def test_empty_blocks_and_text_only_answers() -> None:
    """A block without calls says nothing (Kimi-K2 writes empty sections):
    it is dropped, never given back as markup."""
    assert parse(MiniMaxM2Parser, ["<minimax:tool_call>\n</minimax:tool_call>ok"]) == [Text("ok")]
    for cls, _ in FAMILIES.values():
        assert parse(cls, list("Just an answer, with <b>tags</b> and [brackets].")) == [
            Text("Just an answer, with <b>tags</b> and [brackets].")
        ]


def test_glm_call_without_arguments() -> None:
    assert_parses(Glm45Parser, "<tool_call>get_weather\n</tool_call>", call("get_weather", {}))


def test_deepseek_v3_fenced_form() -> None:
    text = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
        '{"city": "Oslo"}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    )
    assert_parses(DeepSeekV31Parser, text, call("get_weather", {"city": "Oslo"}))


def test_kimi_names_from_the_call_id() -> None:
    for head in ("functions.get_weather:7", "get_weather:0", "get_weather"):
        text = (
            f"<|tool_calls_section_begin|><|tool_call_begin|>{head}<|tool_call_argument_begin|>"
            '{"city": "Rome"}<|tool_call_end|><|tool_calls_section_end|>'
        )
        assert_parses(KimiK2Parser, text, call("get_weather", {"city": "Rome"}))


def test_gemma_notation() -> None:
    assert parse_gemma_value('{a:<|"|>x, "y"<|"|>,b:[1,-2.5e3,true,null],c:{d:None}}') == {
        "a": 'x, "y"',
        "b": [1, -2500.0, True, None],
        "c": {"d": None},
    }
    assert parse_gemma_value('{"q":"json too"}') == {"q": "json too"}


def test_pythonic_tags_and_text_after() -> None:
    text = '<|python_start|>[get_weather(city="Paris", days=2)]<|python_end|>'
    assert_parses(Llama4PythonicParser, text, call("get_weather", {"city": "Paris", "days": 2}))
    assert_parses(Llama4PythonicParser, "[1, 2] are numbers", [Text("[1, 2] are numbers")])


@pytest.mark.parametrize(
    "cls",
    [
        QwenXmlParser,
        SeedOssParser,
        MiniMaxM2Parser,
        Glm45Parser,
        DeepSeekV32Parser,
        DeepSeekV4Parser,
        DeepSeekV41Parser,
        KimiK3Parser,
        Gemma4Parser,
        Llama4PythonicParser,
    ],
)
def test_parameter_syntax_round_trip(cls: type[ToolParser]) -> None:
    """What a grammar writes from ``call_syntax`` and ``parameter_syntax``
    (raw strings, JSON otherwise) parses back into the same arguments."""
    args = {
        "file_path": "/a b/c.py",
        "old_string": "x = 1\ny = 'z'",
        "new_string": "",
        "replace_all": True,
        "ranges": [3],
    }
    prefix, suffix = cls.call_syntax("Edit")

    def param(key: str, value: Any) -> str:
        string = cls.raw_string_values and isinstance(value, str)
        before, after = cls.parameter_syntax(key, string)
        return before + (value if string else json.dumps(value)) + after

    one = prefix + cls.parameter_separator.join(param(k, v) for k, v in args.items()) + suffix
    text = one + cls.call_separator + one
    expected = call("Edit", args) * 2
    assert parse(cls, list(text), strict=True, stream_arguments=True) == expected
    assert parse(cls, [text]) == expected


@pytest.mark.parametrize("cls", [KimiK2Parser, DeepSeekV31Parser, NemotronParser, GraniteParser])
def test_json_call_syntax_round_trip(cls: type[ToolParser]) -> None:
    args = '{"city": "東京", "days": 2}'
    prefix, suffix = cls.call_syntax("get_weather")
    text = prefix + args + suffix + cls.call_separator + prefix + args + suffix
    assert (
        parse(cls, list(text), strict=True, stream_arguments=True)
        == [
            CallStart("get_weather"),
            CallArgs(
                args
                if cls not in (NemotronParser, GraniteParser)
                else json.dumps(json.loads(args), ensure_ascii=False)
            ),
            CallEnd(),
        ]
        * 2
    )


def test_a_format_the_parser_does_not_read_is_named_once_per_model(caplog: pytest.LogCaptureFixture) -> None:
    from missive.kernel.plugins import Kernel
    from missive.tools.parsers.hermes import HermesParser
    from missive.tools.parsers.unparsed import UnparsedCallWatch

    specs = Kernel(load_entry_points=False).tool_parsers
    qwen = qwen_call("get_weather", {"city": "Paris"})
    with caplog.at_level("WARNING", logger="missive.tools"):
        for _ in range(2):  # a second generation of the same model: no second warning
            watch = UnparsedCallWatch("model-a", HermesParser(TOOLS), specs)
            for i in range(0, len(qwen), 3):
                watch.feed(qwen[i : i + 3])
            watch.finish()
        for model, parser, text in [
            ("model-b", HermesParser(TOOLS), "<weird_call name=x>"),
            ("model-c", HermesParser(TOOLS), "<invoke x>"),
            ("model-d", QwenXmlParser(TOOLS), "<tool_call>\n<function=broken"),
        ]:
            watch = UnparsedCallWatch(model, parser, specs)
            watch.feed(text)
            watch.finish()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "model-a" in lines[0] and 'settings.tool_parser = "qwen3_xml"' in lines[0] and "hermes" in lines[0]
    assert "model-c" in lines[1] and "no registered parser knows" in lines[1]


@pytest.mark.parametrize(
    "family", ["qwen3_xml", "seed_oss", "minimax_m2", "glm45", "deepseek_v32", "deepseek_v4", "kimi_k3"]
)
def test_a_value_quoting_the_format_s_closing_tags_stays_whole(family: str) -> None:
    """A closing tag ends a value, or a call, only where the format's next
    element follows it: code quoting ``</parameter> </function>`` (or the
    family's own tags) stays in the value, at every split point."""
    cls, write = FAMILIES[family]
    quoted = {
        "qwen3_xml": "</parameter> </function> then </tool_call>",
        "seed_oss": "</parameter> </function>",
        "minimax_m2": "</parameter> </invoke>",
        "glm45": "</arg_value> x </tool_call>",
        "deepseek_v32": "</｜DSML｜parameter> </｜DSML｜invoke>",
        "deepseek_v4": "</｜DSML｜parameter> </｜DSML｜invoke>",
        "kimi_k3": "<|close|>argument<|sep|> <|close|>call<|sep|>",
    }[family]
    assert RawValueLanguage.build(cls.value_forbids()).accepts(quoted)  # a forced call may write it too
    edit = {**EDIT, "old_string": f'print("{quoted} x")'}
    text = "Fixing it.\n" + write(("Edit", edit))
    expected = [
        Text("Fixing it.\n"),
        *call("Edit", edit),
    ]  # the newline: dropped by the core (space_before_call)
    assert_parses(cls, text, expected)


def test_text_between_two_glm_calls_keeps_both() -> None:
    """GLM's block close ends its call: text after a complete call is text,
    and a later call is read."""
    text = glm_call("get_weather", WEATHER) + "Then:" + glm_call("Edit", EDIT)
    assert_parses(Glm45Parser, text, [*call("get_weather", WEATHER), Text("Then:"), *call("Edit", EDIT)])


RAW_FORMATS = [
    QwenXmlParser,
    SeedOssParser,
    MiniMaxM2Parser,
    Glm45Parser,
    DeepSeekV32Parser,
    DeepSeekV41Parser,
    KimiK3Parser,
    Gemma4Parser,
]


@pytest.mark.parametrize("cls", RAW_FORMATS, ids=lambda c: c.name)
def test_every_value_a_forced_call_may_write_parses_back(cls: type[ToolParser]) -> None:
    """Property: a string the raw-value automaton accepts (what the grammar
    lets a forced call write, :meth:`ToolParser.value_forbids`), written as
    the grammar writes a call, parses back to itself, whole and char by char.
    Strings are drawn from the characters of the format's own tags."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    language = RawValueLanguage.build(cls.value_forbids())
    alphabet = "".join(sorted(language.alphabet | set("ab/<> \n=")))
    pieces = st.sampled_from([p for parts in cls.value_forbids() for p in parts] + list(alphabet))

    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(pieces, max_size=8).map("".join))
    def check(value: str) -> None:
        if not language.accepts(value):
            return
        args = {"file_path": "a.py", "old_string": value}
        prefix, suffix = cls.call_syntax("Edit")
        params = [(k, *cls.parameter_syntax(k, True)) for k in args]
        body = cls.parameter_separator.join(p + args[k] + s for k, p, s in params)
        text = prefix + body + suffix
        want = call("Edit", args)
        assert parse(cls, [text]) == want, text
        assert parse(cls, list(text)) == want, text

    check()
