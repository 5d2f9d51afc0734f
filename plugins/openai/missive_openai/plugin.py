"""Registers the ``openai`` driver (nothing heavy imported here)."""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "register_drivers"]

#: What any OpenAI-compatible server is assumed to do; operators widen or
#: narrow it per model with ``settings.capabilities``:
#:
#: * ``tool_choice`` ``auto`` and ``none``: the two modes every server with
#:   tool support takes; ``any`` (``required``) and ``tool`` (named) are
#:   enforced only by some servers, so an operator declares them;
#: * ``temperature`` and ``top_p`` (the OpenAI fields); ``top_k`` is an extra
#:   field only some servers take;
#: * ``count_tokens = "approximate"``: there is no tokenize endpoint in the
#:   OpenAI API; the prompt size is estimated for ``count_tokens`` and
#:   ``message_start``, and the server's exact usage is reported in
#:   ``message_delta`` (and the non-streaming body);
#: * no media, thinking or structured output unless declared.
CAPABILITIES = Capabilities(
    tool_choice=frozenset({"auto", "none"}),
    parallel_tool_calls=True,
    sampling=frozenset({"temperature", "top_p"}),
    count_tokens="approximate",
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="openai",
            factory="missive_openai.driver:OpenAIDriver",
            capabilities=CAPABILITIES,
            description="Any OpenAI-compatible /v1/chat/completions server (capabilities set in config)",
            extra="openai",
        )
    ]
