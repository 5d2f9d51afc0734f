"""Device check: the llamacpp driver with n_gpu_layers = -1 and a vision projector on CUDA."""

import asyncio
import io
import subprocess
import time
from pathlib import Path

import llama_cpp

from missive.config import ModelEntry
from missive.media.types import ImageInput
from missive.protocol.schema.blocks import TextBlock
from missive.testing import collect_events, generation_request, text_of
from missive_llamacpp.driver import LlamaCppDriver

HERE = Path(__file__).parent
print(
    "llama_cpp",
    llama_cpp.__version__,
    "gpu offload supported:",
    bool(llama_cpp.llama_supports_gpu_offload()),
    flush=True,
)


def gpu_mem():
    try:
        return subprocess.run(
            ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader"], capture_output=True, text=True
        ).stdout.strip()
    except FileNotFoundError:
        return "n/a"


def png(color, size=(40, 30)):
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", size, color).save(out, format="PNG")
    return ImageInput("image/png", out.getvalue(), *size)


def req(image):
    r = generation_request([{"role": "user", "content": "x"}], model="m", max_tokens=12, temperature=0.0)
    r.conversation.turns[0].blocks = [image, TextBlock(type="text", text="What colour is it?")]
    return r


async def run(layers, verbose):
    entry = ModelEntry(
        driver="llamacpp",
        context_window=2048,
        settings={
            "model_path": str(HERE / "tiny-llm.gguf"),
            "mmproj_path": str(HERE / "mmproj.gguf"),
            "n_gpu_layers": layers,
            "seed": 1,
            "verbose": verbose,
        },
    )
    d = LlamaCppDriver(f"m{layers}", entry)
    t = time.time()
    await d.start()
    load = time.time() - t
    out = {
        "layers": layers,
        "load_s": round(load, 2),
        "gpu_mem_after_load": gpu_mem(),
        "input_media": sorted(d.capabilities.input_media),
    }
    red, blue = png((220, 20, 20)), png((20, 20, 220))
    out["count"] = await d.count_tokens(req(red))
    ev = await collect_events(d.generate(req(red)))
    out["started"] = (ev[0].input_tokens, ev[0].cache_read_input_tokens)
    out["red"] = text_of(ev)
    ev2 = await collect_events(d.generate(req(red)))
    out["again_cache_read"] = ev2[0].cache_read_input_tokens
    ev3 = await collect_events(d.generate(req(blue)))
    out["blue"] = text_of(ev3)
    out["blue_cache_read"] = ev3[0].cache_read_input_tokens
    import numpy as np

    from missive_llamacpp.runner import _prefill

    llm = d.runner.llm
    for name, image in (("logits_red", red), ("logits_blue", blue)):
        tokens, media = d._tokenize(req(image))
        llm.reset()
        assert _prefill(llm, tokens, lambda: False, media, d.runner.projector)
        out[name] = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),)).copy()
        media.close()
    await d.aclose()
    return out


async def main():
    gpu = await run(-1, verbose=True)
    cpu = await run(0, verbose=False)
    import numpy as np

    for r in (cpu, gpu):
        print({k: v for k, v in r.items() if not k.startswith("logits")}, flush=True)
    diff = lambda a, b: float(np.max(np.abs(a - b)))  # noqa: E731
    print(
        "SAME COUNT",
        cpu["count"] == gpu["count"],
        "SAME CACHE",
        (cpu["again_cache_read"], cpu["blue_cache_read"])
        == (gpu["again_cache_read"], gpu["blue_cache_read"]),
        "max|gpu-cpu| red",
        diff(gpu["logits_red"], cpu["logits_red"]),
        "blue",
        diff(gpu["logits_blue"], cpu["logits_blue"]),
        "max|red-blue| gpu",
        diff(gpu["logits_red"], gpu["logits_blue"]),
        "cpu",
        diff(cpu["logits_red"], cpu["logits_blue"]),
        "logit scale",
        float(np.std(cpu["logits_red"])),
        flush=True,
    )


asyncio.run(main())
