"""Is a greedy answer that differs from another one still "the same greedy
answer", up to llama.cpp's rounding?

llama.cpp does not give bit-identical logits when the batch changes size:
a sequence decoded beside others (parallel slots) sums its matrix products
in another order than alone, so where two tokens are nearly tied, greedy
decoding may pick the other one, and the texts part from there
(ggml-org/llama.cpp#6950, #7052: "llama.cpp does not produce bit-for-bit
identical results as the batch size is changed"). A test that wants "the
batched answer is the alone one" must therefore accept a parting at a near
tie, and only there: a slot that read another conversation's state, or a
wrong position, gives tokens far from the top.

:func:`assert_same_greedy_answer` checks that: equal texts pass; otherwise
the embedded model, loaded here alone, reads the prompt (rendered with the
model's own chat template, its length checked against the server's count)
and the common part of the two answers, and both next tokens must be within
:data:`TIE_MARGIN` of the best logit.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from missive.messages.templating import render_prompt
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.trial import model_params

#: Logit units. Rounding moves SmolLM2's logits by far less than this; a
#: token from another conversation's state is many units below the top.
TIE_MARGIN = 1.0


@functools.lru_cache(maxsize=2)
def _model(path: str | None = None, n_ctx: int = 2048) -> Any:
    import llama_cpp

    # Extra buffer types off: the reference must load on every CPU (AMX).
    with model_params(use_extra_bufts=False):
        return llama_cpp.Llama(model_path=path or str(default_model_path()), n_ctx=n_ctx, verbose=False)


def assert_same_greedy_tokens(
    path: str, prompt: list[int], got: list[int], wanted: list[int], what: str, *, n_ctx: int = 8192
) -> bool:
    """:func:`assert_same_greedy_answer` on token ids, for any GGUF model
    (``path``): pass if ``got`` equals ``wanted``, or if they part where the
    model, reading ``prompt`` and their common part alone, has its two next
    tokens within :data:`TIE_MARGIN` of its best logit."""
    if got == wanted:
        return True
    _assert_near_tie(_model(path, n_ctx), list(prompt), got, wanted, what)
    return False


def _assert_near_tie(llm: Any, prompt: list[int], a: list[int], b: list[int], what: str) -> None:
    """Token sequences ``a`` and ``b`` after ``prompt`` part at a near tie of ``llm``, read alone."""
    k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    llm.reset()
    llm.eval(prompt + a[:k])
    # The last token's logits (``Llama.scores`` keeps them only with
    # ``logits_all``, a row per context position).
    logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).astype(np.float64)
    end = llm.token_eos()
    here, there = (a[k] if k < len(a) else end), (b[k] if k < len(b) else end)
    best = float(logits.max())
    gaps = best - float(logits[here]), best - float(logits[there])
    detail = (
        f"{what}: the answers part at token {k} ({llm.detokenize([here])!r} vs {llm.detokenize([there])!r}, "
        f"{gaps[0]:.3f} and {gaps[1]:.3f} below the best logit)"
    )
    assert max(gaps) <= TIE_MARGIN, detail + f"\nnot a near tie (margin {TIE_MARGIN})"
    print(detail + "\na near tie: llama.cpp's rounding with another batch size (accepted)")


def _tokens(text: str, llm: Any = None) -> list[int]:
    return list((llm or _model()).tokenize(text.encode(), add_bos=False, special=False))


def fresh_greedy(
    path: str,
    template: str,
    conversation: list[dict[str, Any]],
    max_tokens: int,
    *,
    bos_token: str = "",
    n_ctx: int = 8192,
) -> str:
    """The greedy answer of the model at ``path`` alone (an empty context, one
    sequence) to ``conversation`` rendered with ``template``: what a cached
    or restored state must reproduce."""
    llm = _model(path, n_ctx)
    prompt = llm.tokenize(
        render_prompt(template, conversation, bos_token=bos_token).encode(), add_bos=False, special=True
    )
    llm.reset()
    llm.eval(list(prompt))
    out: list[int] = []
    for _ in range(max_tokens):
        logits = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
        token = int(np.argmax(logits))
        if llama_vocab_is_eog(llm, token):
            break
        out.append(token)
        llm.eval([token])
    return llm.detokenize(out).decode("utf-8", errors="ignore")


def llama_vocab_is_eog(llm: Any, token: int) -> bool:
    import llama_cpp

    return bool(llama_cpp.llama_vocab_is_eog(llm._model.vocab, token))


def assert_same_greedy_answer(
    got: str,
    wanted: str,
    messages: list[dict[str, Any]],
    system: str | None,
    prompt_tokens: int,
    what: str,
    *,
    path: str | None = None,
    template: str | None = None,
    bos_token: str = "",
    n_ctx: int = 2048,
) -> bool:
    """Pass if ``got`` equals ``wanted``, or if they part where the model's
    two next tokens are tied within :data:`TIE_MARGIN` (module doc).

    ``messages``/``system``: the request (text content only);
    ``prompt_tokens``: the server's ``count_tokens`` of it, which the
    reference rendering must match. Returns True when the texts are equal
    (the caller may then compare what follows from them: stop reason,
    output tokens).

    Raises:
        AssertionError: they part at a token that is not a near tie, or the
            reference prompt is not the server's.
    """
    if got == wanted:
        return True
    llm = _model(path, n_ctx)
    conversation = ([{"role": "system", "content": system}] if system is not None else []) + messages
    template = template or llm.metadata["tokenizer.chat_template"]
    prompt = llm.tokenize(
        render_prompt(template, conversation, bos_token=bos_token).encode(), add_bos=False, special=True
    )
    assert len(prompt) == prompt_tokens, (
        f"{what}: the reference renders {len(prompt)} prompt tokens, the server counts {prompt_tokens}"
    )
    try:
        _assert_near_tie(llm, list(prompt), _tokens(got, llm), _tokens(wanted, llm), what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n got:    {got!r}\n wanted: {wanted!r}") from None
    return False
