"""``missive serve --model hf://OWNER/REPO`` of an MLX repository: the
folder is downloaded from a stand-in Hugging Face Hub (``HF_ENDPOINT``,
:mod:`missive.testing.hub`) and served by the mlx driver, chosen from the
repository's files."""

from __future__ import annotations

import os
from pathlib import Path

import anthropic

from missive.testing import serve_process
from missive.testing.hub import Hub, Repo

REPO = "mlx-community/SmolLM2-135M-Instruct-4bit"


def test_serve_an_mlx_repository_by_reference(mlx_model_dir: Path, tmp_path: Path) -> None:
    files: dict[str, Path | bytes] = {p.name: p for p in mlx_model_dir.iterdir() if p.is_file()}
    files["README.md"] = b"# SmolLM2 in MLX\n"
    hub = Hub({REPO: Repo(files)})
    url = hub.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=url, HF_HUB_CACHE=str(tmp_path), HF_HUB_DISABLE_TELEMETRY="1")
    try:
        with serve_process(
            None, args=("--model", f"hf://{REPO}", "--context-window", "2048"), env=env
        ) as server:
            client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
            models = {m.id: m for m in client.models.list()}
            reply = client.messages.create(
                model="smollm2-135m-instruct-4bit", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
            )
            log = server.log()
    finally:
        hub.stop()
    assert models["smollm2-135m-instruct-4bit"].max_input_tokens == 2048
    assert "claude-smollm2-135m-instruct-4bit" in models
    assert reply.usage.output_tokens > 0
    assert (
        "driver mlx, context 2048 tokens" in log
        and "(Hugging Face mlx-community/SmolLM2-135M-Instruct-4bit" in log
    )
    assert hub.downloads("model.safetensors") == [None]
