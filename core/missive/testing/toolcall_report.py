"""Replaying the whole canitoolcall corpus through Missive's parsers
(:mod:`missive.testing.toolcall_conformance`) and the results table of
docs/models.md.

``python -m missive.testing.toolcall_report --write docs/models.md``
replays every fixture in both modes and rewrites the table between the
markers in that file; ``--failures`` lists each failing check.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .toolcall_conformance import MODES, STRATEGIES, MissiveAdapter

__all__ = [
    "NOT_CARRIED",
    "CONFLICTS",
    "BEGIN",
    "END",
    "replay_fixture",
    "load_corpus",
    "run_corpus",
    "results_table",
    "write_table",
    "main",
]

#: Fixtures whose expected parse the Messages API cannot carry: id -> reason.
#: They are replayed and shown, never counted as passes.
NOT_CARRIED: dict[str, str] = {
    "gemma4/vllm-dotted-function-name": (
        "the tool is named 'weather.get': a Messages API tool name matches ^[a-zA-Z0-9_-]{1,64}$, "
        "so no request can offer it"
    ),
}

#: Fixtures whose expected parse contradicts another fixture of the same
#: shape, so that no parser passes both: id -> reason. They come out soft.
CONFLICTS: dict[str, str] = {
    "gemma4/vllm-text-before-call": (
        "'...for you. <|tool_call>' expects the space before the call dropped (vLLM's test), while "
        "gemma4/sglang-text-before-call, 'Some text before <|tool_call>', expects it kept (SGLang's test); "
        "Gemma 4's template writes the call right after the content, so Missive keeps it"
    ),
}


def replay_fixture(fixture: Any, family: Any, mode: str, strategies: Sequence[str] = STRATEGIES) -> Any:
    """One fixture replayed in ``mode``: a canitoolcall ``CaseResult``."""
    from canitoolcall.adapters.worker import replay
    from canitoolcall.chunking import ChunkStrategy
    from canitoolcall.runner import evaluate

    reply = replay(MissiveAdapter(mode), fixture, family, [ChunkStrategy.parse(s) for s in strategies])  # type: ignore[arg-type]
    return evaluate(fixture, family, reply, include_observed="failures", synthetic=())


def load_corpus() -> list[tuple[Any, Any]]:
    """Every fixture of the installed corpus with its family."""
    from canitoolcall.fixtures import load_fixtures
    from canitoolcall.pytest_plugin import family_for

    return [(f, family_for(f)) for f in load_fixtures(None)]


def run_corpus(mode: str, strategies: Sequence[str] = STRATEGIES) -> list[Any]:
    return [replay_fixture(f, fam, mode, strategies) for f, fam in load_corpus()]


def _counts(cases: Sequence[Any]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for case in cases:
        status = case.status.value
        if status in ("pass", "soft_pass") and case.fixture_id in NOT_CARRIED:
            status = "not_carried"
        counts[status] += 1
    return counts


def results_table(results: Mapping[str, Sequence[Any]]) -> str:
    """The Markdown table of :func:`run_corpus` results by mode and family."""
    families = sorted({c.family for cases in results.values() for c in cases})
    lines = [
        "| parsers | family | fixtures | pass | soft | fail | unsupported | not carried | pass or soft |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for mode, cases in results.items():
        for fam in [*families, "all"]:
            subset = [c for c in cases if fam == "all" or c.family == fam]
            n = _counts(subset)
            total = len(subset)
            counted = total - n["unsupported"] - n["not_carried"]
            ok = n["pass"] + n["soft_pass"]
            share = f"{100 * ok / counted:.1f} %" if counted else "-"
            label = f"**{fam}**" if fam == "all" else fam
            lines.append(
                f"| {mode} | {label} | {total} | {n['pass']} | {n['soft_pass']} | {n['fail'] + n['error']} "
                f"| {n['unsupported']} | {n['not_carried']} | {share} |"
            )
    return "\n".join(lines)


BEGIN = "<!-- toolcall-conformance:begin -->"
END = "<!-- toolcall-conformance:end -->"


def write_table(path: Path, table: str) -> None:
    """Replace the text between :data:`BEGIN` and :data:`END` in ``path``."""
    text = path.read_text("utf-8")
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    if not rest:
        raise SystemExit(f"{path}: no {BEGIN} ... {END} markers")
    path.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", "utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="rewrite the table in this Markdown file")
    parser.add_argument("--failures", action="store_true", help="list each failing fixture")
    parser.add_argument("--mode", choices=MODES, action="append", help="only this mode (repeatable)")
    parser.add_argument("--family", action="append", help="only this family (repeatable)")
    args = parser.parse_args(argv)
    results: dict[str, list[Any]] = {}
    corpus = load_corpus()
    if args.family:
        corpus = [(f, fam) for f, fam in corpus if f.family in args.family]
    for mode in args.mode or MODES:
        results[mode] = [replay_fixture(f, fam, mode) for f, fam in corpus]
        if args.failures:
            for case in results[mode]:
                if case.status.value not in ("pass", "unsupported"):
                    bad = [r for r in case.checks if r.status.value not in ("pass",)]
                    print(f"{mode} {case.status.value} {case.fixture_id}")
                    for row in bad[:4]:
                        print(f"    {row.check} [{row.strategy}] {row.status.value}: {row.detail}")
    table = results_table(results)
    print(table)
    if args.write:
        write_table(args.write, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
