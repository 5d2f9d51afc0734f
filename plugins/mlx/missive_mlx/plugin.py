"""Registration hooks of ``missive-mlx`` (entry point group ``missive``).

Nothing here imports ``mlx`` or ``mlx_lm``: listing plugins stays fast and
works where MLX cannot load. The driver class is named by a lazy
``"module:attr"`` factory (:class:`missive.kernel.specs.DriverSpec`).
"""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "register_drivers"]

#: What the driver can do for any MLX model: plain-text chat, all three
#: sampling parameters (mlx-lm's ``make_sampler``), exact token counts (the
#: model's tokenizer on the rendered prompt), reuse of cached prompt prefixes
#: across requests (refined to False per model when
#: ``prompt_cache_entries = 0``), one generation at a time per model unless
#: ``parallel`` says more (the driver sets ``max_concurrency`` per model:
#: :mod:`missive_mlx.batched`). Tools in every ``tool_choice`` mode:
#: ``auto`` parsed from the model's text by the parser of its chat
#: template's format, ``any``/``tool`` (strict tools too) and structured
#: output sampled under an llguidance grammar (:mod:`missive_mlx.constrain`).
#: No media here: a vision model folder of a family
#: :mod:`missive_mlx.vision` places images for (mlx-vlm installed) declares
#: the image types per model (the driver, before load). Reasoning as
#: thinking blocks for models whose chat template has a reasoning format
#: (the budget enforced by the engine).
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "any", "tool", "none"}),
    strict_tools=frozenset({"any", "tool"}),
    parallel_tool_calls=True,
    input_media=frozenset(),
    thinking=True,  # models whose template has a reasoning format; each loaded model narrows it
    structured_output=True,
    count_tokens="exact",
    prompt_caching=True,
    in_process=True,
    max_concurrency=1,
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="mlx",
            factory="missive_mlx.driver:MlxDriver",
            capabilities=CAPABILITIES,
            description=(
                "MLX models in-process with mlx-lm (Apple Silicon; CPU on Linux), prompt-prefix cache"
            ),
            extra="mlx",
            model_format="mlx",
        )
    ]
