"""A request on its way to an answer: who asks (:class:`Caller`) and what
is ready to begin on one model (:class:`Prepared`).

Made by :meth:`missive.serving.service.Messages.prepare`, begun by
:meth:`~missive.serving.service.Messages.begin`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..driver.interface import Driver, GenerationRequest
from ..messages.extras import ContextExtras
from ..messages.prepare import Notes
from ..protocol.schema.request import CountTokensRequest

if TYPE_CHECKING:
    from .admission import Permit
    from .record import RequestRecord

__all__ = ["Admit", "Caller", "Prepared"]

#: Takes an admission permit for an answer (waits for it; raises a 529 when
#: the queue is full).
Admit = Callable[[], Awaitable["Permit"]]


@dataclass(frozen=True)
class Caller:
    """Who asks for an answer: what the service needs of the HTTP request
    (or of a batch's request), and where it reports back.

    Attributes:
        request_id: ``req_...``.
        record: the request's record (log line, metrics).
        notes: what becomes the ``missive-ignored`` and
            ``missive-dropped-thinking`` headers.
        headers: the HTTP request's headers, names lowercased (empty for
            a batch request).
    """

    request_id: str
    record: RequestRecord
    notes: Notes
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Prepared:
    """A request ready to begin on one model.

    Attributes:
        request: the request as the client sent it (its ``model`` names the
            answer's model).
        model_id: the configured model that answers.
        driver: that model's driver.
        generation: what the driver is asked.
        extras: what conversation management adds to the answer.
        caller: who asks (and its notes).
        fallback: the model answers as a ``fallbacks`` entry (the answer
            says so in ``usage.iterations``).
        leading: whole blocks that open the answer, before the model's
            (the ``mcp_tool_listing`` blocks of :mod:`missive.tools.mcp`).
    """

    request: CountTokensRequest
    model_id: str
    driver: Driver
    generation: GenerationRequest
    extras: ContextExtras
    caller: Caller
    fallback: bool = False
    leading: list[dict[str, Any]] = field(default_factory=list)

    @property
    def notes(self) -> Notes:
        """What becomes the response's headers."""
        return self.caller.notes
