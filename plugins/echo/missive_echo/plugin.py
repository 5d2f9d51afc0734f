"""Registers the ``echo`` driver."""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (missive.kernel.compat; docs/hooks.md, "Compatibility").
MISSIVE_API = "1"


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="echo",
            factory="missive_echo.driver:EchoDriver",
            capabilities=Capabilities(count_tokens="exact", in_process=True),
            description="Scripted test driver: echoes the last user message, or plays a JSON script.",
            extra="echo",
        )
    ]
