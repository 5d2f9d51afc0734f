"""``missive pull``, ``missive models`` and ``missive serve --model`` for
real, against a local stand-in for the Hugging Face Hub (``HF_ENDPOINT``,
:mod:`missive.testing.hub`) serving the packaged SmolLM2 GGUF, and an
Ollama store built in a temporary folder. No network."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from test_model_sources import ollama_store, smollm2

from missive.testing import serve_process
from missive.testing.hub import Hub, Repo

SMOL_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"
SMOL_FILE = "smollm2-135m-instruct-q4_1.gguf"
TOKEN = "hf_test_token_0123"
MLX_CONFIG = {
    "model_type": "llama",
    "max_position_embeddings": 8192,
    "quantization": {"group_size": 32, "bits": 4},
}
CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def hub() -> Iterator[Hub]:
    gguf = smollm2()
    hub = Hub(
        {
            SMOL_REPO: Repo({SMOL_FILE: gguf, "README.md": b"# SmolLM2 GGUF\n"}),
            "org/gated-GGUF": Repo({"model-Q4_1.gguf": gguf}, token=TOKEN),
            "org/vision-GGUF": Repo(
                {
                    "model-Q4_1.gguf": gguf,
                    "mmproj-model-f32.gguf": b"f32 projector",
                    "mmproj-model-F16.gguf": b"f16 projector",
                }
            ),
            "mlx-community/tiny-4bit": Repo(
                {
                    "config.json": json.dumps(MLX_CONFIG).encode(),
                    "model.safetensors": b"\0" * 4096,
                    "tokenizer_config.json": json.dumps({"chat_template": CHATML}).encode(),
                    "README.md": b"# an MLX model\n",
                    "original/consolidated.pth": b"not part of an MLX folder",
                }
            ),
        }
    )
    hub.start()
    yield hub
    hub.stop()


def hf_env(hub: Hub, cache: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MISSIVE", "HF_"))}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HUB_CACHE=str(cache),
        HF_HUB_DISABLE_TELEMETRY="1",
        OLLAMA_MODELS=str(cache / "no-ollama"),
        **extra,
    )
    return env


def missive(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "missive", *args], capture_output=True, text=True, timeout=300, env=env
    )


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_downloads_into_the_cache_resumes_and_reuses_it(hub: Hub, tmp_path: Path) -> None:
    env = hf_env(hub, tmp_path)
    hub.cut_after = 30_000_000  # the first download loses its connection after 30 MB
    first = missive("pull", f"hf://{SMOL_REPO}", env=env)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.split(": ", 1)[1].split(" (", 1)[0])
    assert (
        path.is_relative_to(tmp_path / f"models--{SMOL_REPO.replace('/', '--')}") and path.name == SMOL_FILE
    )
    assert sha256(path) == sha256(smollm2())
    assert (
        "(Hugging Face HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, 93.8 MiB, Q4_1, trained context 8192, chat "
        "template chatml)" in first.stdout
    )
    assert f"downloading {SMOL_FILE} (93.8 MiB) from {SMOL_REPO}" in first.stderr
    ranges = hub.downloads(SMOL_FILE)
    assert (
        ranges[0] is None and ranges[1] is not None and int(ranges[1].split("=")[1].rstrip("-")) > 0
    )  # resumed
    # Cached: asked about (HEAD), not downloaded again, whatever the spelling of the tag.
    again = missive("pull", f"hf://{SMOL_REPO}:q4_1", env=env)
    assert again.returncode == 0, again.stderr
    assert str(path) in again.stdout and "downloading" not in again.stderr
    assert len(hub.downloads(SMOL_FILE)) == 2
    # Offline: from the cache, asking the server nothing.
    asked = len(hub.requests)
    offline = missive("pull", f"hf://{SMOL_REPO}", env={**env, "HF_HUB_OFFLINE": "1"})
    assert offline.returncode == 0, offline.stderr
    assert str(path) in offline.stdout and len(hub.requests) == asked
    missing = missive("pull", "hf://org/vision-GGUF", env={**env, "HF_HUB_OFFLINE": "1"})
    assert missing.returncode == 1
    assert (
        "HF_HUB_OFFLINE is set and the cache" in missing.stderr
        and "missive pull hf://org/vision-GGUF" in missing.stderr
    )
    assert len(hub.requests) == asked


def test_errors_name_the_repository_and_the_files(hub: Hub, tmp_path: Path) -> None:
    env = hf_env(hub, tmp_path)
    gated = missive("pull", "hf://org/gated-GGUF", env=env)
    assert gated.returncode == 1
    assert "the repository org/gated-GGUF at http://127.0.0.1:" in gated.stderr and "is gated" in gated.stderr
    assert "HF_TOKEN" in gated.stderr
    with_token = missive("pull", "hf://org/gated-GGUF", env={**env, "HF_TOKEN": TOKEN})
    assert with_token.returncode == 0, with_token.stderr
    assert "model-Q4_1.gguf (Hugging Face org/gated-GGUF" in with_token.stdout
    absent = missive("pull", "hf://org/absent-GGUF:Q4_K_M", env=env)
    assert absent.returncode == 1 and "no repository org/absent-GGUF at http://127.0.0.1:" in absent.stderr
    quant = missive("pull", f"hf://{SMOL_REPO}:Q8_0", env=env)
    assert quant.returncode == 1
    assert f"no GGUF file with quantization 'Q8_0' (files: {SMOL_FILE})" in quant.stderr
    not_model = missive("pull", f"hf://{SMOL_REPO}:README.md", env=env)
    assert not_model.returncode == 1 and "no GGUF file with quantization 'README.md'" in not_model.stderr
    nothing = missive("pull", env=env)
    assert nothing.returncode == 1 and "nothing to pull" in nothing.stderr


def test_a_vision_repository_brings_its_projector(hub: Hub, tmp_path: Path) -> None:
    pulled = missive("pull", "hf://org/vision-GGUF", env=hf_env(hub, tmp_path))
    assert pulled.returncode == 0, pulled.stderr
    assert "projector mmproj-model-F16.gguf" in pulled.stdout
    assert hub.downloads("mmproj-model-F16.gguf") and not hub.downloads("mmproj-model-f32.gguf")


def test_an_mlx_repository_is_a_folder(hub: Hub, tmp_path: Path) -> None:
    env = hf_env(hub, tmp_path)
    pulled = missive("pull", "hf://mlx-community/tiny-4bit", env=env)
    assert pulled.returncode == 0, pulled.stderr
    folder = Path(pulled.stdout.split(": ", 1)[1].split(" (", 1)[0])
    assert sorted(p.name for p in folder.iterdir()) == [
        "config.json",
        "model.safetensors",
        "tokenizer_config.json",
    ]
    assert "4bit, trained context 8192, chat template chatml" in pulled.stdout
    wrong = missive("pull", "hf://mlx-community/tiny-4bit:Q4_K_M", env=env)
    assert wrong.returncode == 1 and "is an MLX model folder; it takes no ':Q4_K_M'" in wrong.stderr


def test_models_lists_the_cache_ollama_and_the_configured_models(hub: Hub, tmp_path: Path) -> None:
    cache = tmp_path / "hub"
    env = hf_env(hub, cache)
    for ref in (f"hf://{SMOL_REPO}", "hf://mlx-community/tiny-4bit"):
        assert missive("pull", ref, env=env).returncode == 0
    env["OLLAMA_MODELS"] = str(ollama_store(tmp_path / "ollama", smollm2()))
    config = tmp_path / "missive.toml"
    config.write_text(
        '[models.smol]\ndriver = "llamacpp"\n[models.smol.settings]\nmodel_path = "hf://HuggingFaceTB/SmolLM2-135M-Instruct-GGUF"\n'
        '[models.later]\ndriver = "llamacpp"\n[models.later.settings]\nmodel_path = "hf://org/vision-GGUF"\n'
        '[models.remote]\ndriver = "echo"\n'
    )
    listed = missive("models", "--config", str(config), "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = {(r["kind"], r["name"]): r for r in json.loads(listed.stdout)}
    assert set(rows) == {
        ("configured", "smol"),
        ("configured", "later"),
        ("huggingface", f"hf://{SMOL_REPO}"),
        ("huggingface", "hf://mlx-community/tiny-4bit"),
        ("ollama", "smollm2:135m"),
    }
    size = smollm2().stat().st_size
    for key in (("configured", "smol"), ("huggingface", f"hf://{SMOL_REPO}"), ("ollama", "smollm2:135m")):
        row = rows[key]
        assert (row["size"], row["quantization"], row["context_length"], row["template_family"]) == (
            size,
            "Q4_1",
            8192,
            "chatml",
        ), key
        assert row["sampling"] == "api", key  # SmolLM2: no general.sampling.* keys, not in the family table
    assert rows["ollama", "smollm2:135m"]["path"].startswith(env["OLLAMA_MODELS"])
    assert (
        rows["configured", "later"]["error"]
        == "hf://org/vision-GGUF: not downloaded yet (`missive pull hf://org/vision-GGUF` fetches it)"
    )
    mlx = rows["huggingface", "hf://mlx-community/tiny-4bit"]
    assert (mlx["quantization"], mlx["context_length"], mlx["template_family"]) == ("4bit", 8192, "chatml")
    asked = len(hub.requests)
    table = missive("models", "--config", str(config), env=env)
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SIZE", "QUANT", "CONTEXT", "TEMPLATE", "SAMPLING", "SOURCE"]
    assert any(
        line.split()[:7] == ["smollm2:135m", "93.8", "MiB", "Q4_1", "8192", "chatml", "api"] for line in lines
    )
    assert "later: hf://org/vision-GGUF: not downloaded yet" in table.stdout
    assert hub.requests[asked:] == []  # listing asks the Hub nothing


def _chat(client: anthropic.Anthropic, model: str) -> Any:
    return client.messages.create(
        model=model,
        max_tokens=5,
        messages=[{"role": "user", "content": "Say hi"}],
        extra_body={"temperature": 0},
    )  # sampled, the answer may be empty


def test_serve_fetches_references_on_start_with_defaults_from_the_file(hub: Hub, tmp_path: Path) -> None:
    """One server, three sources: ``--model hf://...`` (fetched before
    serving, no configuration), ``--model NAME`` from an Ollama store, and a
    config entry whose model_path is a reference (fetched at start)."""
    env = hf_env(hub, tmp_path / "hub")
    env["OLLAMA_MODELS"] = str(ollama_store(tmp_path / "ollama", smollm2()))
    config = {
        "models": {
            "from-config": {
                "driver": "llamacpp",
                "context_window": 1024,
                "settings": {"model_path": f"hf://{SMOL_REPO}:Q4_1", "parallel": 1},
            }
        }
    }
    args = ("--model", f"hf://{SMOL_REPO}", "--model", "smollm2:135m")
    with serve_process(config, args=args, env=env) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0)
        listed = {m.id: m for m in client.models.list(limit=100)}
        for model in ("smollm2-135m-instruct", "smollm2:135m", "from-config"):
            reply = _chat(client, model)
            assert reply.usage.output_tokens > 0 and reply.content[0].text, model
        assert _chat(client, "claude-any-model-id").usage.output_tokens > 0  # the claude-* alias
        log = server.log()
    assert {"smollm2-135m-instruct", "claude-smollm2-135m-instruct", "smollm2:135m", "from-config"} <= set(
        listed
    )
    assert listed["smollm2-135m-instruct"].max_input_tokens == 8192  # the file's training context (< 32768)
    assert listed["from-config"].max_input_tokens == 1024
    assert listed["smollm2-135m-instruct"].display_name == "Smollm2 135M 8k Lc100K Mix1 Ep2"  # general.name
    # What was chosen is printed: the file, its facts, the driver, context, aliases...
    assert (
        f"model smollm2-135m-instruct: {tmp_path / 'hub'}" in log
        and "(Hugging Face HuggingFaceTB/SmolLM2-135M-Instruct-GGUF, 93.8 MiB, Q4_1, trained context 8192, "
        "chat template chatml)"
        "; driver llamacpp, context 8192 tokens, aliases claude-smollm2-135m-instruct, claude-*"
        in log
    ), log
    blob = Path(env["OLLAMA_MODELS"]) / "blobs" / f"sha256-{sha256(smollm2())}"
    assert f"model smollm2:135m: {blob} (Ollama smollm2:135m, 93.8 MiB, Q4_1" in log  # the blob, in place
    # ... and once loaded, the formats settled from the chat template.
    assert "model smollm2-135m-instruct ready: context_window=8192 slots=" in log
    assert "chat_template=chatml tool_format=hermes reasoning_format=none" in log
    assert (
        f"model from-config: hf://{SMOL_REPO}:Q4_1 is {tmp_path / 'hub'}" in log
    )  # the config entry, fetched at start


def test_serve_refuses_a_reference_it_cannot_fetch(hub: Hub, tmp_path: Path) -> None:
    env = hf_env(hub, tmp_path)
    direct = missive("serve", "--model", "hf://org/gated-GGUF", env=env)
    assert direct.returncode == 1 and "org/gated-GGUF" in direct.stderr and "is gated" in direct.stderr
    config = tmp_path / "m.toml"
    config.write_text(
        '[models.m]\ndriver = "llamacpp"\n[models.m.settings]\nmodel_path = "hf://mlx-community/tiny-4bit"\n'
    )
    wrong = missive("serve", "--config", str(config), env=env)
    assert wrong.returncode == 1
    assert (
        "model 'm': hf://mlx-community/tiny-4bit is an MLX model, and driver 'llamacpp' loads GGUF models"
        in wrong.stderr
    )


def test_models_with_no_configuration_lists_the_default_model(hub: Hub, tmp_path: Path) -> None:
    """With no configuration, `missive models` shows what `missive serve` would serve."""
    env = hf_env(hub, tmp_path / "hub", XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    listed = missive("models", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["kind"], r["name"]) for r in rows] == [("configured", "smollm2-135m")]
    assert rows[0]["quantization"] == "Q4_1" and rows[0]["context_length"] == 8192
