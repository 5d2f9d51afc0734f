"""What a remote backend's answer is to its transport: a whole
:class:`Answer`, a :class:`Failover` (try the next replica) or an error, as
the driver's ``classify`` decides; the stream's end line (:func:`sse_done`).
The policy itself is described in :mod:`missive.remote.transport`."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..protocol import fastjson
from ..protocol.errors import MissiveError

__all__ = ["Failover", "Classify", "Answer", "describe", "sse_done", "END_GRACE"]

#: Seconds :meth:`RemoteStream.lines` waits for the body to end after the
#: backend's end-of-answer line (it normally follows in the same packet).
END_GRACE = 1.0


def sse_done(line: str) -> bool:
    """Whether ``line`` is the OpenAI streaming sentinel ``data: [DONE]``."""
    return line.startswith("data:") and line[5:].strip() == "[DONE]"


@dataclass(frozen=True)
class Failover:
    """What :data:`Classify` returns for an error status that is the
    replica's, not the request's: send the request to another replica.

    Attributes:
        reason: why, for logs, status pages and the 529's message.
        down: True: take the replica out of rotation until a health probe
            passes (it is not serving: loading, crashed behind a proxy);
            False: skip it for this request only (it is busy: queue full).
    """

    reason: str
    down: bool = True
    #: try once more (a fresh connection, possibly the same replica) before
    #: counting it: a kept-alive connection the replica closed as it was
    #: reused looks like a dropped one.
    once_more: bool = False


#: The driver's reading of an error answer before the stream began:
#: ``(status, body, headers, replica_url) -> Failover | MissiveError``.
#: ``body`` is the whole response body (bytes, possibly empty); ``headers``
#: is case-insensitive (``headers.get("retry-after")``).
Classify = Callable[[int, bytes, Mapping[str, str], str], "Failover | MissiveError"]


@dataclass(frozen=True)
class Answer:
    """A whole (non-streamed) 2xx answer of :meth:`RemoteTransport.request`.

    Attributes:
        status: the HTTP status.
        headers: its headers (case-insensitive mapping).
        content: the body, bytes.
        url: the replica's base URL that answered.
    """

    status: int
    headers: Mapping[str, str]
    content: bytes
    url: str

    @property
    def text(self) -> str:
        """The body as UTF-8 text (undecodable bytes replaced)."""
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON. Raises ``ValueError`` when it is not."""
        return fastjson.loads(self.content)


def describe(exc: BaseException, name: str | None = None) -> str:
    """``"ConnectError: [Errno 111] Connection refused"``: an exception for a
    log line, under ``name`` (the policy's word for it) when given."""
    return f"{name or type(exc).__name__}: {exc}".rstrip(": ")
