"""Registers the ``openai`` front door (``register_front_doors``, docs/hooks.md)."""

from __future__ import annotations

from missive.api import FrontDoorSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"


@hookimpl
def register_front_doors() -> list[FrontDoorSpec]:
    return [
        FrontDoorSpec(
            name="openai",
            factory="missive_openai_api.routes:blueprint",
            description="OpenAI Chat Completions (/v1/chat/completions) and Responses (/v1/responses)"
            " on the same models, keys and limits.",
        )
    ]
