"""Registration hook of ``missive-markov`` (entry point group ``missive``).

Cheap to import: the driver module (and httpx) loads only when a configured
model uses the driver.
"""

from __future__ import annotations

from missive.api import Capabilities, DriverSpec, hookimpl

#: The plugin API this plugin is built for (docs/hooks.md, "Compatibility").
MISSIVE_API = "1"

__all__ = ["CAPABILITIES", "register_drivers"]

#: What the backend really does, no more: plain text (no tools, images,
#: thinking or structured output, so the core answers those requests with
#: its 400); temperature and top_k (the chain has no nucleus cut, so top_p
#: is refused too); exact counts (the backend's /tokenize uses the rule its
#: /generate counts with); stop sequences (matched by the core).
CAPABILITIES = Capabilities(
    sampling=frozenset({"temperature", "top_k"}),
    count_tokens="exact",
    in_process=False,
)


@hookimpl
def register_drivers() -> list[DriverSpec]:
    return [
        DriverSpec(
            name="markov",
            factory="missive_markov.driver:MarkovDriver",
            capabilities=CAPABILITIES,
            description="A toy bigram text model served by markov-backend (an example third-party driver)",
        )
    ]
