"""A model's default sampling (issue 27): the GGUF's ``general.sampling.*``
keys, else the family table, else ``generation_config.json``, else the API's;
a request's own values win field by field. Live: ``missive models`` lists
them (and the llamacpp plugin's tests show them applied)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from missive.sampling import (
    FAMILIES,
    NO_DEFAULTS,
    Values,
    family_for,
    folder_sampling,
    gguf_names,
    model_sampling,
)


def test_gguf_keys_win_and_are_read_as_llama_cpp_python_gives_them() -> None:
    # llama-cpp-python's Llama.metadata holds every scalar as a string
    meta = {
        "general.name": "Qwen3 Coder 30B A3B Instruct",
        "general.sampling.temp": "0.5",
        "general.sampling.top_k": "7",
        "general.sampling.min_p": "0.050000",
    }
    chosen = model_sampling(meta, gguf_names(meta, "model.gguf"))
    assert chosen.source == "gguf"
    assert chosen.values == Values(temperature=0.5, top_p=None, top_k=7, min_p=0.05)
    assert chosen.describe() == "temperature=0.5,top_k=7,min_p=0.05(gguf)"
    # the GGUF header reader gives numbers
    assert model_sampling({"general.sampling.top_p": 0.9}).values == Values(top_p=0.9)


@pytest.mark.parametrize(
    ("names", "family"),
    [
        (["Qwen3 Coder 30B A3B Instruct"], "qwen3-coder"),
        (["Qwen3-Coder-Next-Q4_K_M.gguf"], "qwen3-coder"),
        (["Qwen3 4B Instruct 2507"], "qwen3-instruct-2507"),
        (["Qwen3-30B-A3B-Thinking-2507"], "qwen3-thinking-2507"),
        (["Qwen3 8B"], "qwen3"),
        (["Qwen3.5 27B"], None),  # another generation, other values: not guessed from Qwen3's
        (["GLM 4.6"], "glm-4.5+"),
        (["MiniMax-M2"], "minimax-m2"),
        (["Kimi K2 Thinking"], "kimi-k2-thinking"),
        (["Kimi-K2-Instruct-0905"], "kimi-k2"),
        (["gemma-3-270m-it-Q4_K_M.gguf"], "gemma-3"),
        (["Gemma 3 270m It"], "gemma-3"),
        (["Seed-OSS-36B-Instruct"], "seed-oss"),
        (["gpt-oss-20b"], "gpt-oss"),
        (
            ["SmolLM2 135M Instruct", "SmolLM2-135M-Instruct.Q4_1.gguf"],
            None,
        ),  # the embedded model: API defaults
        ([], None),
    ],
)
def test_family_table_by_name(names: list[str], family: str | None) -> None:
    found = family_for(names)
    assert (found.name if found else None) == family
    chosen = model_sampling({"general.name": names[0]} if names else {}, names)
    assert chosen.source == (f"table:{family}" if family else "api")


def test_every_family_names_its_source() -> None:
    assert len({f.name for f in FAMILIES}) == len(FAMILIES)
    for family in FAMILIES:
        assert family.source and family.values != Values(), family.name


def test_request_values_win_and_thinking_mode_has_its_own() -> None:
    qwen3 = model_sampling({}, ["Qwen3-8B"])
    assert qwen3.resolve(None, None, None) == Values(0.7, 0.8, 20, 0.0)  # non-thinking mode
    assert qwen3.resolve(None, None, None, thinking=True) == Values(0.6, 0.95, 20, 0.0)
    assert qwen3.resolve(0.0, None, 50) == Values(0.0, 0.8, 50, 0.0)  # the request's own, field by field
    assert NO_DEFAULTS.resolve(None, None, None) == Values()  # the API's: nothing set
    assert NO_DEFAULTS.describe() == "api"


def test_generation_config_is_the_last_source(tmp_path: Path) -> None:
    folder = tmp_path / "models--org--SomeModel-4bit" / "snapshots" / "abc123"
    folder.mkdir(parents=True)
    assert folder_sampling(folder) is NO_DEFAULTS
    (folder / "generation_config.json").write_text(
        json.dumps({"temperature": 0.6, "top_p": 0.9, "do_sample": True})
    )
    assert folder_sampling(folder).describe() == "temperature=0.6,top_p=0.9(generation_config)"
    (folder / "generation_config.json").write_text(json.dumps({"temperature": 0.6, "do_sample": False}))
    assert folder_sampling(folder) is NO_DEFAULTS  # greedy by default there: no sampling values to take
    # the repository's name above a cache snapshot finds the family
    qwen = tmp_path / "models--mlx-community--Qwen3-Coder-30B-A3B-Instruct-4bit" / "snapshots" / "def456"
    qwen.mkdir(parents=True)
    assert folder_sampling(qwen).source == "table:qwen3-coder"


def test_missive_models_lists_the_default_sampling(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")  # a test dependency of the llamacpp plugin
    from missive.models.commands import render_rows
    from missive.models.sources.catalogue import _row
    from missive.models.sources.local import local_path_model
    from missive.models.sources.refs import parse_ref

    rows = []
    for name, extra in (
        ("with-keys", {"general.sampling.temp": 0.3, "general.sampling.top_k": 11}),
        ("Qwen3-Coder-tiny", {}),
        ("plain", {}),
    ):
        path = tmp_path / f"{name}.gguf"
        writer = gguf.GGUFWriter(str(path), "llama")
        writer.add_name(name)
        for key, value in extra.items():
            (writer.add_float32 if isinstance(value, float) else writer.add_uint32)(key, value)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.close()
        rows.append(_row(name, "huggingface", local_path_model(parse_ref(str(path)))))
    assert [r.sampling for r in rows] == [
        "temperature=0.3,top_k=11(gguf)",
        "temperature=0.7,top_p=0.8,top_k=20(table:qwen3-coder)",
        "api",
    ]
    table = render_rows(rows).splitlines()
    assert table[0].split()[5] == "SAMPLING"
    assert table[1].split()[6] == "temperature=0.3,top_k=11(gguf)"  # SIZE is two words: "0.0 MiB"
