"""Asking llama.cpp whether it takes a grammar, before a sequence uses it.

``llama_sampler_init_grammar`` returns NULL for grammar text its parser
refuses (it logs ``parse: error parsing grammar: ...``), and
llama-cpp-python's ``LlamaSampler.add_grammar`` adds that NULL to the
sampler chain: the next token sampled dereferences it and the process dies
(measured: a schema with ``minLength: 2001``, over llama.cpp's repetition
limit, killed the server with SIGSEGV in the decode loop). Missive parses
every grammar once here, in the request's worker thread, and answers a
refusal with a 400; the runner checks again when it builds the chain.
"""

from __future__ import annotations

from typing import Any

import llama_cpp

from missive.api import InvalidRequestError

__all__ = ["add_grammar", "grammar_refused", "grammar_sampler"]


def grammar_sampler(model: Any, text: str) -> Any:
    """A grammar sampler for ``text`` on ``model`` (a ``LlamaModel``'s
    vocabulary), or None when llama.cpp's parser refuses the text."""
    sampler = llama_cpp.llama_sampler_init_grammar(model.vocab, text.encode("utf-8"), b"root")
    return sampler or None


def grammar_refused(runner: Any, text: str) -> str | None:
    """Why llama.cpp refuses ``text`` on the runner's model, or None when it
    takes it (or no model is loaded to ask)."""
    llm = getattr(runner, "llm", None)
    if llm is None:
        return None
    sampler = grammar_sampler(llm._model, text)
    if sampler is None:
        return (
            "llama.cpp's grammar parser refused the grammar made from the schema (the server log names "
            "the part: a count above 2,000, an escape it does not know...); simplify the schema"
        )
    llama_cpp.llama_sampler_free(sampler)
    return None


def add_grammar(chain: Any, model: Any, text: str) -> None:
    """``chain.add_grammar`` that refuses rather than adding a NULL sampler."""
    sampler = grammar_sampler(model, text)
    if sampler is None:
        raise InvalidRequestError("llama.cpp's grammar parser refused the grammar made from the schema")
    llama_cpp.llama_sampler_chain_add(chain.sampler, sampler)
