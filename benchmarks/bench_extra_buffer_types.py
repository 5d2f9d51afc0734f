"""What llama.cpp's extra buffer types are worth: the cost of the llamacpp
driver's fallback (``extra_buffer_types = "off"``), same model, same run.

Loads the GGUF twice with llama-cpp-python, with ``use_extra_bufts`` on (weights
repacked for the CPU's AMX or AVX2/AVX-512 kernels where the weight types have
such kernels) and off (what the driver serves with after a crash), and
measures, alternating the two so machine noise hits both alike:

* prompt tokens/s: one ``llama_decode`` of a fresh prompt of ``--prompt-tokens``
  tokens (``n_batch`` = the prompt);
* decode tokens/s: ``--decode-tokens`` single-token decodes after it.

Also the start-up trial's own time (``choose_extra_buffer_types`` with no
record). Medians of ``--runs``; the ratio off/on is what the fallback keeps.
Where the trial finds that extra buffer types crash llama.cpp on this CPU
(AMX), only "off" is measured and the report says why: loading them in this
process would kill it.
Default model: the embedded SmolLM2-135M (Q4_1); ``--model`` takes any GGUF.

    .venv/bin/python benchmarks/bench_extra_buffer_types.py [--runs 5] [--model PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Any

import llama_cpp

from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import available_cpus, parse_settings
from missive_llamacpp.trial import choose_extra_buffer_types, model_params

TEXT = b"The history of the lighthouse begins with fires lit on hills to guide ships at night. " * 64


def load(path: str, use: bool, threads: int, n_batch: int) -> Any:
    with model_params(use_extra_bufts=use):
        return llama_cpp.Llama(
            model_path=path,
            n_ctx=4096,
            n_batch=n_batch,
            n_ubatch=n_batch,
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
        )


def measure(llm: Any, prompt: list[int], steps: int) -> tuple[float, float]:
    """(prompt tokens/s, decode tokens/s) for one fresh prompt."""
    llm.reset()
    llm._ctx.kv_cache_clear()
    start = time.perf_counter()
    llm.eval(prompt)
    prompt_s = time.perf_counter() - start
    token = prompt[-1]
    start = time.perf_counter()
    for _ in range(steps):
        llm.eval([token])
    decode_s = time.perf_counter() - start
    return len(prompt) / prompt_s, steps / decode_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=str(default_model_path()))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--decode-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=available_cpus())
    args = parser.parse_args()

    info = llama_cpp.llama_print_system_info().decode(errors="replace").strip()
    print(f"model: {args.model}\nthreads: {args.threads}\nCPU: {info}")

    with tempfile.TemporaryDirectory() as state:
        os.environ["MISSIVE_STATE_DIR"] = state
        settings = parse_settings("bench", {"model_path": args.model, "n_threads": args.threads})
        start = time.perf_counter()
        choice = choose_extra_buffer_types(settings, "bench")
        print(f"start-up trial: {time.perf_counter() - start:.2f} s -> {choice.describe()}")

    kinds = (True, False) if choice.use_extra_bufts else (False,)
    models = {use: load(args.model, use, args.threads, args.prompt_tokens) for use in kinds}
    prompt = models[False].tokenize(TEXT, add_bos=True)[: args.prompt_tokens]
    results: dict[bool, list[tuple[float, float]]] = {use: [] for use in kinds}
    for use in kinds:
        measure(models[use], prompt, 8)  # warm-up
    for _ in range(args.runs):
        for use in kinds:
            results[use].append(measure(models[use], prompt, args.decode_tokens))

    med = {
        use: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
        for use, runs in results.items()
    }
    print(f"\n{'':26}{'prompt tok/s':>14}{'decode tok/s':>14}")
    if not choice.use_extra_bufts:
        print(f"extra buffer types on      not measured: they crash llama.cpp here ({choice.why})")
    for use in kinds:
        print(f"extra buffer types {'on ' if use else 'off'}      {med[use][0]:14.1f}{med[use][1]:14.1f}")
    if choice.use_extra_bufts:
        print(
            "ratio off/on              "
            f"{med[False][0] / med[True][0]:14.3f}{med[False][1] / med[True][1]:14.3f}"
        )


if __name__ == "__main__":
    main()
