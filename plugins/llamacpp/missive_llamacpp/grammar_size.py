"""Keeping a schema's grammar small and shallow enough for llama.cpp.

Measured with llama-cpp-python 0.3.36 on SmolLM2 (``output_config.format``
``{"type": "string", "maxLength": 3000}``): the whole server died of a
segmentation fault. The library's converter writes a repetition ``x{0,n}`` as
``n`` nested groups, ``(x (x (x ...)?)?)?``, and llama.cpp's GBNF parser
descends one C++ stack frame per group (``parse_sequence`` /
``parse_alternates`` in ``src/llama-grammar.cpp``): 1,000 levels parsed,
2,000 did not. A ``minLength`` of 10^8 wrote a 500 MB grammar before that.

Two rules here, both applied before anything reaches llama.cpp:

* :func:`repetition` writes repetitions in GBNF's own bounded form,
  ``x{m,n}`` (llama.cpp's grammar syntax since 2024, ``grammars/README.md``
  "Repetition and quantifiers"; the parser expands it into one rule per
  optional item, iteratively, ``handle_repetitions``), with a separator as
  ``x ("," x){m-1,n-1}``: the rule llama.cpp's own
  ``examples/json_schema_to_grammar.py`` ``_build_repetition`` follows.
  :func:`install` puts it in place of the library's ``_build_repetition``
  (a module-level function its converter calls by name).
* A count above :data:`MAX_REPEAT` (``minLength``, ``maxItems``, a pattern's
  ``{n}``, multiplied through nested groups by :func:`pattern_size`) is not
  turned into grammar: :mod:`missive_llamacpp.enforced` reports it as not
  enforced, so a strict tool is refused naming it and any other schema is
  relaxed without it, as for the keywords the converter ignores.

:func:`nesting` measures the groups a finished grammar nests; the driver
refuses one deeper than :data:`MAX_NESTING` whatever produced it.
"""

from __future__ import annotations

import re

import llama_cpp.llama_grammar as _library

__all__ = ["MAX_NESTING", "MAX_REPEAT", "install", "nesting", "pattern_size", "repetition"]

#: The largest count written into a grammar: llama.cpp's parser refuses a
#: repetition above 2,000 ("number of repetitions exceeds sane defaults",
#: ``MAX_REPETITION_THRESHOLD`` in ``src/llama-grammar.cpp``); a pattern's
#: counts multiplied through its groups (:func:`pattern_size`) are held to it too.
MAX_REPEAT = 2_000
#: The deepest nesting of groups a grammar may have (llama.cpp's parser
#: crashed between 1,000 and 2,000 on an 8 MB thread stack).
MAX_NESTING = 256


def repetition(
    item_rule: str,
    min_items: int,
    max_items: int | None,
    separator_rule: str | None = None,
    item_rule_is_literal: bool = False,
) -> str:
    """GBNF for ``item_rule`` repeated ``min_items`` to ``max_items`` times
    (None: unbounded), separated by ``separator_rule``; the signature of
    ``llama_cpp.llama_grammar._build_repetition``."""
    if max_items == 0:
        return ""
    if min_items == 0 and max_items == 1:
        return f"{item_rule}?"
    if not separator_rule:
        if item_rule_is_literal and min_items == max_items:
            return '"' + item_rule[1:-1] * min_items + '"'  # a literal repeated exactly: one literal
        if min_items == 1 and max_items is None:
            return f"{item_rule}+"
        if min_items == 0 and max_items is None:
            return f"{item_rule}*"
        upper = "" if max_items is None else str(max_items)
        return f"{item_rule}{{{min_items},{upper}}}"
    rest = repetition(
        f"({separator_rule} {item_rule})",
        min_items - 1 if min_items > 0 else 0,
        max_items - 1 if max_items is not None else None,
    )
    result = f"{item_rule} {rest}".rstrip()
    return f"({result})?" if min_items == 0 else result


def install() -> None:
    """Make llama-cpp-python's converter write repetitions with :func:`repetition`."""
    _library._build_repetition = repetition


_QUANTIFIER = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")


def pattern_size(pattern: str) -> int:
    """An upper bound on the items a regular expression's bounded
    quantifiers make the converter write: each ``{m,n}`` multiplies what it
    applies to (a group's whole content) by ``max(m, n)``; other atoms count
    one. Conservative: alternatives add up."""
    stack: list[list[int]] = [[0, 0]]  # per open group: its total, the size of its last atom
    i = 0
    while i < len(pattern):
        ch = pattern[i]
        atom = 1
        if ch == "\\":
            i += 2
        elif ch == "[":
            j = i + 1
            while j < len(pattern) and pattern[j] != "]":
                j += 2 if pattern[j] == "\\" else 1
            i = j + 1
        elif ch == "(":
            stack.append([0, 0])
            i += 1
            continue
        elif ch == ")" and len(stack) > 1:
            atom = stack.pop()[0]
            i += 1
        elif ch == "{" and (match := _QUANTIFIER.match(pattern, i)):
            low, high = int(match.group(1)), match.group(2)
            factor = max(low, int(high) if high else low)
            top = stack[-1]
            top[0] += top[1] * (factor - 1)
            top[1] *= factor
            i = match.end()
            continue
        else:
            i += 1
        top = stack[-1]
        top[0] += atom
        top[1] = atom
    return sum(level[0] for level in stack)


def nesting(grammar: str) -> int:
    """The deepest nesting of parenthesised groups in GBNF text (quoted
    literals and character classes skipped)."""
    depth = deepest = 0
    quoted = in_class = escaped = False
    for ch in grammar:
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif quoted:
            quoted = ch != '"'
        elif in_class:
            in_class = ch != "]"
        elif ch == '"':
            quoted = True
        elif ch == "[":
            in_class = True
        elif ch == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch == ")":
            depth -= 1
    return deepest
