"""Registration hook of ``missive-ollama`` (entry point group ``missive``).

Cheap to import: the driver loads only when a model uses it.
"""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "IMAGE_TYPES", "register_drivers"]

#: Image media types Ollama decodes for vision models (its image processing
#: uses Go's image/png and image/jpeg decoders); base64 sources only.
IMAGE_TYPES = frozenset({"image/png", "image/jpeg"})

#: The most the driver offers; each model is narrowed at start-up from
#: ``POST /api/show`` ``capabilities`` ("tools", "vision", "thinking").
#: tool_choice: "auto" is Ollama's only behaviour, "none" is enforced by not
#: sending tools; "any"/"tool" are not declared (Ollama ignores tool_choice and
#: its ``format`` grammar is silently skipped with ``think: false`` on thinking
#: models, ollama/ollama#14645 and #15260). count_tokens is approximate: Ollama
#: has no tokenize endpoint; the exact prompt count arrives with the answer's
#: last chunk and corrects the final usage.
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "none"}),
    parallel_tool_calls=True,
    input_media=IMAGE_TYPES,
    thinking=True,
    structured_output=False,
    count_tokens="approximate",
    prompt_caching=True,
    in_process=False,
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="ollama",
            factory="missive_ollama.driver:OllamaDriver",
            capabilities=CAPABILITIES,
            description="Ollama server over its native API (/api/chat NDJSON); approximate count_tokens",
            extra="ollama",
        )
    ]
