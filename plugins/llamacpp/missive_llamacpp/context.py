"""The llama.cpp context of a loaded model: its KV layout, sized to the machine.

:func:`make_context` replaces the small context ``llama_cpp.Llama`` made
with the one the runner decodes in:

1. a **probe** context of a few hundred cells and one sequence, made with
   the settings' cache types, flash attention and micro-batch, whose log
   lines say what a token and a sequence cost in KV memory for this model
   (:func:`missive_llamacpp.memory.per_token_costs`: full-attention layers,
   window layers, recurrent state);
2. the **fit** (:func:`missive_llamacpp.memory.fit`): ``context_window``,
   slots and the KV pool chosen against the free memory, the arithmetic
   logged;
3. the **context**: ``n_seq_max`` = slots; with ``kv_unified`` (the
   default) one pool of cells the sequences share (``n_ctx`` = the pool,
   as llama-server's ``--kv-unified``), else a KV stream per sequence of a
   whole window each (``n_ctx`` = slots x window, as Ollama sizes it);
   its own log lines give the KV bytes and whether ``flash_attn = "auto"``
   turned flash attention on, for the load log line.

It also says how the model's state can be cut (:data:`~missive_llamacpp.checkpoints.Cut`):
recurrent and hybrid models (``llama_model_is_recurrent``/``_is_hybrid``)
not at all, sliding-window ones (``llama_model_n_swa > 0``) within their
window unless ``swa_full``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import llama_cpp
from llama_cpp import _internals as internals

from missive.api import ConfigError

from .checkpoints import Cut
from .memory import MIB, Costs, Fit, LogCapture, Report, fit, free_memory, parse_report, per_token_costs
from .settings import LlamaCppSettings

__all__ = ["Layout", "make_context"]

_FLASH = {
    "auto": llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


def _ggml_type(name: str) -> int:
    return int(getattr(llama_cpp, f"GGML_TYPE_{name.upper()}"))


@dataclass
class Layout:
    """The context the runner decodes in, and what it is made of.

    Attributes:
        ctx: the ``llama_cpp._internals.LlamaContext``.
        fit: the sizes chosen (window, slots, pool) and their arithmetic.
        unified: one pool for every slot (``kv_unified``).
        n_ctx: the context's cells (llama.cpp may round the pool up).
        cut: how a sequence's state can be cut.
        n_swa: the sliding window, 0 for none (or ``swa_full``).
        costs: KV bytes a token and a sequence take.
        report: what llama.cpp said making the context.
    """

    ctx: Any
    fit: Fit
    unified: bool
    n_ctx: int
    cut: Cut
    n_swa: int
    costs: Costs
    report: Report

    def describe(self, settings: LlamaCppSettings) -> str:
        """For the load log line: ``KV pool 32768 tokens shared by 4 slots
        (kv_unified), 382 MiB (K q8_0, V q8_0), flash_attn auto: on,
        n_batch 512, n_ubatch 512, prompt reuse: checkpoints (hybrid)``."""
        if self.unified:
            layout = f"KV pool {self.n_ctx} tokens shared by {self.fit.slots} slots (kv_unified)"
        else:
            layout = f"KV {self.fit.slots} slots x {self.fit.window} tokens (kv_unified = false)"
        flash = {True: "on", False: "off", None: "?"}[self.report.flash_attn]
        if settings.flash_attn != "auto":
            flash = settings.flash_attn
        reuse = {
            "any": "any prefix",
            "window": f"window of {self.n_swa} or checkpoints ({settings.ctx_checkpoints} a slot)",
            "none": f"whole cached prefix or checkpoints ({settings.ctx_checkpoints} a slot)",
        }[self.cut]
        return (
            f"{layout}, {self.report.kv_bytes // MIB} MiB (K {settings.cache_type_k}, V "
            f"{settings.cache_type_v}), "
            f"compute {self.report.compute_bytes // MIB} MiB, flash_attn {settings.flash_attn}: {flash}, "
            f"n_batch {settings.n_batch}, n_ubatch {settings.n_ubatch}, prompt reuse: {reuse}"
        )


def _params(llm: Any, s: LlamaCppSettings, *, cells: int, seqs: int, unified: bool) -> Any:
    params = type(llm.context_params).from_buffer_copy(llm.context_params)
    params.n_ctx = cells
    params.n_batch = s.n_batch
    params.n_ubatch = s.n_ubatch
    params.n_seq_max = seqs
    params.kv_unified = unified
    params.flash_attn_type = _FLASH[s.flash_attn]
    params.type_k = _ggml_type(s.cache_type_k)
    params.type_v = _ggml_type(s.cache_type_v)
    params.swa_full = s.swa_full
    return params


def _create(llm: Any, params: Any, model_id: str, what: str, verbose: bool) -> tuple[Any, Report]:
    with LogCapture.capture(forward=verbose) as lines:
        try:
            ctx = internals.LlamaContext(model=llm._model, params=params, verbose=verbose)
        except ValueError as exc:
            said = " ".join(
                line.strip() for line in lines if "error" in line.lower() or "failed" in line.lower()
            )
            raise ConfigError(f"model '{model_id}': llama.cpp could not make {what}: {said or exc}") from exc
    return ctx, parse_report(lines)


def make_context(
    llm: Any,
    settings: LlamaCppSettings,
    model_id: str,
    *,
    window: int | None,
    host_cache_bytes: int,
    model_bytes: int,
    host_weight_bytes: int = 0,
) -> Layout:
    """Probe, fit and make the context (module documentation); ``llm``'s
    own context is closed first and replaced by the new one.

    Args:
        window: the entry's ``context_window`` (None: auto).
        host_cache_bytes: the host-memory prompt cache's budget (RAM the
            KV cache must leave to it).
        model_bytes: the GGUF's size (weights mapped in RAM on CPU).
        host_weight_bytes: weights the tensor overrides keep in host memory
            when the layers are on the GPU (experts: ``n_cpu_moe``), which
            count against RAM, not VRAM.

    Raises:
        ConfigError: it does not fit, or llama.cpp could not make it.
    """
    s = settings
    model = llm.model
    trained = int(llama_cpp.llama_model_n_ctx_train(model))
    recurrent = bool(llama_cpp.llama_model_is_recurrent(model) or llama_cpp.llama_model_is_hybrid(model))
    n_swa = 0 if s.swa_full else int(llama_cpp.llama_model_n_swa(model))
    cut: Cut = "none" if recurrent else ("window" if n_swa > 0 else "any")
    llm._ctx.close()  # the small context Llama made: the probe and the real one replace it
    probe_cells = -(-max(1024, n_swa + s.n_ubatch + 256) // 256) * 256
    probe, report = _create(
        llm,
        _params(llm, s, cells=probe_cells, seqs=1, unified=True),
        model_id,
        f"a probe context of {probe_cells} tokens",
        s.verbose,
    )
    probe.close()
    costs = per_token_costs(report, probe_cells, n_swa)
    layers = int(llama_cpp.llama_model_n_layer(model))
    gpu = s.gpu_layers != 0 and bool(llama_cpp.llama_supports_gpu_offload())
    on_gpu = gpu and (s.gpu_layers < 0 or s.gpu_layers >= layers)
    # The KV cache lives with its layers unless kv_offload is off; weights an
    # override keeps in host memory then take RAM beside it.
    kv_on_gpu = on_gpu and s.kv_offload
    budget = free_memory(
        on_gpu=kv_on_gpu,
        model_bytes=(host_weight_bytes if on_gpu else model_bytes),
        host_cache_bytes=host_cache_bytes,
        host_weight_bytes=(host_weight_bytes if kv_on_gpu else 0),
    )
    chosen = fit(
        model_id,
        costs,
        budget,
        trained=trained,
        window=window,
        parallel=s.parallel,
        pool=s.kv_pool_tokens,
        unified=s.kv_unified,
    )
    unified = s.kv_unified
    cells = chosen.pool if unified else chosen.slots * chosen.window
    ctx, report = _create(
        llm,
        _params(llm, s, cells=cells, seqs=chosen.slots, unified=unified),
        model_id,
        f"a context of {chosen.slots} slots and {cells} tokens (memory: {chosen.arithmetic})",
        s.verbose,
    )
    llm._ctx = ctx
    n_ctx = int(llama_cpp.llama_n_ctx(ctx.ctx))
    return Layout(ctx, chosen, unified, n_ctx, cut, n_swa, costs, report)


def warm_up(llm: Any, ctx: Any) -> None:
    """An empty run before the first request, as llama.cpp's own tools make
    (``common_init_from_params`` in ``common/common.cpp``, on unless
    ``--no-warmup``): BOS and EOS (whichever the vocabulary has; token 0
    without either) decoded once with ``llama_set_warmup`` on, then the
    memory cleared and the context synchronised. The first request then pays
    no one-time costs (the weights' pages mapped in, compute buffers and the
    thread pool made): a hit in a restored slot after a restart answers as
    fast as one before it.
    """
    model = llm.model
    if not llama_cpp.llama_model_has_decoder(model):
        return
    vocab = llama_cpp.llama_model_get_vocab(model)
    tokens = [t for t in (llama_cpp.llama_vocab_bos(vocab), llama_cpp.llama_vocab_eos(vocab)) if t != -1] or [
        0
    ]
    array = (llama_cpp.llama_token * len(tokens))(*tokens)
    llama_cpp.llama_set_warmup(ctx, True)
    try:
        llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(array, len(tokens)))
    finally:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(ctx), True)
        llama_cpp.llama_synchronize(ctx)
        llama_cpp.llama_set_warmup(ctx, False)
