"""Registers the ``echo`` driver."""

from __future__ import annotations

from missive import hookimpl
from missive.capabilities import Capabilities
from missive.specs import DriverSpec


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
