"""Registers the ``llamaserver`` driver (nothing heavy imported here)."""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "register_drivers"]

#: What a llama-server model can do (``settings.thinking`` adds thinking;
#: ``settings.capabilities`` may narrow it):
#:
#: * all four ``tool_choice`` modes: ``auto`` through llama-server's own
#:   tool-call parsing (``--jinja``; templates without tool support get the
#:   Hermes convention and Missive's parser), ``any``/``tool`` by a
#:   JSON-schema grammar admitting one valid call (llama-server itself ignores
#:   a named choice and enforces ``required`` only for templates it
#:   recognises), ``none`` by not offering the tools;
#: * ``strict_tools`` under ``any``/``tool``: the grammar holds the
#:   arguments to the schema;
#: * ``structured_output``: ``response_format`` json_schema (a grammar);
#: * ``temperature``, ``top_p``, ``top_k``;
#: * ``count_tokens = "exact"``: ``/apply-template`` + ``/tokenize``;
#: * ``prompt_caching``: ``cache_prompt``, reported from the usage's
#:   ``cached_tokens`` (ik_llama.cpp: from ``timings``);
#: * no media: image tokens are not counted by ``/tokenize``, so images are
#:   refused rather than counted wrong.
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "any", "tool", "none"}),
    strict_tools=frozenset({"any", "tool"}),
    parallel_tool_calls=True,
    structured_output=True,
    count_tokens="exact",
    prompt_caching=True,
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="llamaserver",
            factory="missive_llamaserver.driver:LlamaServerDriver",
            capabilities=CAPABILITIES,
            description=(
                "llama.cpp's llama-server or ik_llama.cpp (exact counts, prompt cache, forced tool calls)"
            ),
            extra="llamaserver",
        )
    ]
