"""Every architecture the tiny-GGUF writer has (:data:`missive_llamacpp.testing_archs.ARCHS`)
loads in the installed llama.cpp as that architecture, and its graph computes
finite logits for a prompt batch and a decode step.

The family end-to-end tests serve most of them through a live server; this
checks each entry on its own, so a llama.cpp upgrade that changes a loader
(a key it now requires, a tensor's shape) names the architecture it broke.
The models are loaded in one child process (a llama.cpp abort there is a
failed test naming the architecture being loaded, not a crashed test run),
without extra buffer types: the repacked kernels crash on some CPUs (AMX),
and they are not what is tested here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytest.importorskip("gguf")
from missive_llamacpp.testing_archs import ARCHS  # noqa: E402 - needs gguf

_CHILD = r"""
import json, sys, time
from pathlib import Path
import llama_cpp
import numpy as np
from missive_llamacpp.testing_gguf import write_tiny_gguf
from missive_llamacpp.trial import model_params

folder = Path(sys.argv[1])
for arch in sys.argv[2:]:
    print("@@", json.dumps({"loading": arch}), flush=True)
    print(f"=== {arch}", file=sys.stderr, flush=True)  # llama.cpp's log of this model follows
    path = write_tiny_gguf(folder / f"{arch}.gguf", arch=arch, chat_template="{{ messages[0].content }}",
                           special_tokens=["<|end|>"])
    start = time.monotonic()
    try:
        with model_params(use_extra_bufts=False):
            llm = llama_cpp.Llama(str(path), n_ctx=256, n_threads=1, verbose=True)
    except ValueError as error:  # llama.cpp refused the file (its reason is on stderr)
        print("@@", json.dumps({"arch": arch, "refused": str(error)}), flush=True)
        continue
    load_s = time.monotonic() - start
    tokens = llm.tokenize(b"Weather in Lyon?", add_bos=False)
    llm.eval(tokens[:-1])  # a prompt batch, then one token: the decode step
    llm.eval(tokens[-1:])
    logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
    print("@@", json.dumps({
        "arch": arch, "loaded_as": llm.metadata.get("general.architecture"), "load_s": load_s,
        "size": path.stat().st_size, "prompt_tokens": len(tokens), "n_tokens": llm.n_tokens,
        "logits_finite": bool(np.isfinite(logits).all()), "logits_spread": float(logits.max() - logits.min()),
    }), flush=True)
    del llm
"""


@pytest.fixture(scope="module")
def loaded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """``{arch: what the child saw}``; a refused architecture's record and one the child
    died loading carry the end of llama.cpp's log of that model."""
    folder = tmp_path_factory.mktemp("tiny-archs")
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(folder), *ARCHS], capture_output=True, text=True, timeout=600
    )
    seen: dict[str, Any] = {}
    loading = None
    for line in run.stdout.splitlines():
        if not line.startswith("@@ "):
            continue  # llama.cpp's own output (a backtrace on an abort)
        record = json.loads(line[3:])
        if "loading" in record:
            loading = record["loading"]
        else:
            seen[record["arch"]] = record
    logs = dict(part.split("\n", 1) for part in run.stderr.split("=== ")[1:] if "\n" in part)
    if run.returncode != 0 and loading is not None and loading not in seen:
        seen[loading] = f"the child died (exit {run.returncode}) loading it:\n{logs.get(loading, '')[-3000:]}"
    for arch, record in seen.items():
        if isinstance(record, dict) and "refused" in record:
            record["log"] = logs.get(arch, "")[-3000:]
    return seen


@pytest.mark.parametrize("arch", list(ARCHS))
def test_the_tiny_model_loads_as_its_architecture_and_decodes(arch: str, loaded: dict[str, Any]) -> None:
    record = loaded.get(arch)
    assert isinstance(record, dict), record or "not reached: an earlier architecture ended the child"
    assert "refused" not in record, record
    assert record["loaded_as"] == arch
    assert record["size"] < 2 * 1024 * 1024  # tiny: a few hundred KiB to a MiB or so
    assert record["prompt_tokens"] == len("Weather in Lyon?")  # byte-level vocabulary
    assert record["n_tokens"] == record["prompt_tokens"]  # a prompt batch and a decode step ran
    assert record["logits_finite"] and record["logits_spread"] > 0  # the graph computed, from random weights
