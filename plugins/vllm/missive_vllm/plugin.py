"""Registers the ``vllm`` driver (nothing heavy imported here)."""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "register_drivers"]

#: What vLLM's OpenAI server does for any model (a model's settings add
#: ``vision`` and ``thinking``, and ``settings.capabilities`` may narrow it):
#:
#: * all four ``tool_choice`` modes: ``required`` and named choices are
#:   enforced by vLLM's guided decoding; ``auto`` needs the server started
#:   with ``--enable-auto-tool-choice --tool-call-parser <parser>``;
#: * ``structured_output``: ``response_format: json_schema`` (guided decoding);
#: * ``temperature``, ``top_p`` and ``top_k`` (a vLLM extra field);
#: * ``count_tokens = "exact"``: ``POST /tokenize`` renders the same chat
#:   template with the same messages and tools as the generation;
#: * ``prompt_caching``: automatic prefix caching, reported as
#:   ``cache_read_input_tokens`` when the server runs with
#:   ``--enable-prompt-tokens-details``.
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "any", "tool", "none"}),
    parallel_tool_calls=True,
    structured_output=True,
    count_tokens="exact",
    prompt_caching=True,
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="vllm",
            factory="missive_vllm.driver:VLLMDriver",
            capabilities=CAPABILITIES,
            description=(
                "vLLM's OpenAI-compatible server (exact counts via /tokenize, tools, structured output)"
            ),
            extra="vllm",
        )
    ]
