"""Device check of issue 43's placement settings: experts in host memory, LoRA and a draft model.

Runs the llamacpp driver on a tiny random Qwen3-MoE and a tiny Llama (the test
kit's, written here: needs ``gguf`` and numpy) with ``n_gpu_layers = -1``:

* ``n_cpu_moe = 1`` and ``override_tensor``: llama.cpp's own log says which
  expert tensors went to the CPU buffer type (the rest to the GPU's), and the
  greedy answer equals the one with no override and the one on the CPU;
* ``lora`` at scale 0 and 1, ``draft_model`` (the model as its own draft):
  the same answers on the GPU as on the CPU.

On a machine without a GPU it runs the same on the CPU (``gpus: none`` in the
load lines), which is how it is checked where no GPU is lent. Prints one
``RESULT`` line per case and ``ALL SAME`` when every answer matched.

    PYTHONPATH=core:plugins/llamacpp python3 scripts/device-check/moe_check.py OUT_DIR
"""

import asyncio
import sys
from pathlib import Path

from missive.config import ModelEntry
from missive.testing import collect_events, generation_request, text_of
from missive_llamacpp.driver import LlamaCppDriver
from missive_llamacpp.testing_archs import TinyModel
from missive_llamacpp.testing_gguf import write_tiny_gguf, write_tiny_lora

OUT = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/moe-check")
OUT.mkdir(parents=True, exist_ok=True)
TEMPLATE = "{% for m in messages %}{{ m.content }}\n{% endfor %}"
MOE = write_tiny_gguf(OUT / "moe.gguf", arch="qwen3moe", chat_template=TEMPLATE, special_tokens=["<|end|>"])
LLAMA = write_tiny_gguf(
    OUT / "llama.gguf",
    arch="llama",
    chat_template=TEMPLATE,
    special_tokens=["<|end|>"],
    model=TinyModel(seed=1),
)
ADAPTER = write_tiny_lora(OUT / "style.gguf", LLAMA)


async def answer(name: str, path: Path, layers: int, **settings: object) -> str:
    entry = ModelEntry(
        driver="llamacpp",
        context_window=512,
        settings={
            "model_path": str(path),
            "n_gpu_layers": layers,
            "parallel": 1,
            "extra_buffer_types": "off",
            "verbose": True,
            **settings,
        },
    )
    driver = LlamaCppDriver(name, entry)
    await driver.start()
    request = generation_request(
        [{"role": "user", "content": "Weather in Lyon?"}], model=name, max_tokens=12, temperature=0.0
    )
    text = text_of(await collect_events(driver.generate(request)))
    await driver.aclose()
    print(f"RESULT {name} layers={layers} {settings}: {text!r}", flush=True)
    return text


async def main() -> None:
    moe = {
        "plain": await answer("moe-gpu", MOE, -1),
        "n_cpu_moe": await answer("moe-ncpumoe", MOE, -1, n_cpu_moe=1),
        "override": await answer("moe-ot", MOE, -1, override_tensor=r"blk\.1\.ffn_(up|down)_exps=CPU"),
        "cpu": await answer("moe-cpu", MOE, 0),
    }
    llama = {
        "plain": await answer("llama-gpu", LLAMA, -1),
        "lora0": await answer("llama-lora0", LLAMA, -1, lora=[{"path": str(ADAPTER), "scale": 0.0}]),
        "draft": await answer(
            "llama-draft", LLAMA, -1, speculative="draft", draft_model=str(LLAMA), draft_p_min=0.0
        ),
        "cpu": await answer("llama-cpu", LLAMA, 0),
    }
    lora1 = await answer("llama-lora1", LLAMA, -1, lora=str(ADAPTER))
    same = len(set(moe.values())) == 1 and len(set(llama.values())) == 1 and lora1 != llama["plain"]
    print("ALL SAME" if same else f"DIFFERENT: {moe} {llama} lora1={lora1!r}", flush=True)


asyncio.run(main())
