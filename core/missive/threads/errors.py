"""The API's thread errors, each with ``error.details.error_code``.

The SDKs branch on ``error.details.error_code``, not on the message: the
Python SDK maps ``(status, error_code)`` to an exception class
(``anthropic/_error_classes.py``: ``(404, "thread_not_found")`` is
``ThreadNotFoundError``, ``(400, "thread_already_continued")``...), and its
thread state (``anthropic/lib/threads/_thread_state.py``,
``recovers_from``) resends the whole conversation under a new thread on
``thread_not_found``, ``thread_already_continued`` and
``thread_continue_in_flight``, and sends it without ``thread`` on
``thread_unsupported_request`` when its behaviour is ``continue_unthreaded``
(the tool runners'). The statuses and the meaning of each code are those of
the SDK's types (``anthropic/types/thread_*_error_details.py``); the body is

    {"type": "error", "error": {"type": "not_found_error", "message": "...",
     "details": {"error_code": "thread_not_found"}}, "request_id": "req_..."}
"""

from __future__ import annotations

from ..protocol.errors import InvalidRequestError, MissiveError, NotFoundError

__all__ = [
    "ThreadError",
    "ThreadNotFoundError",
    "ThreadAlreadyContinuedError",
    "ThreadContinueInFlightError",
    "ThreadFingerprintMismatchError",
    "ThreadUnsupportedRequestError",
    "REPLAY",
]

#: What a client does about a thread error it cannot otherwise fix: the
#: SDKs' own recovery, said in every message so a client without it knows.
REPLAY = 'replay the full conversation with thread: {"type": "create"}'


class ThreadError(MissiveError):
    """A thread error: the envelope's ``error.details`` holds its
    :attr:`error_code` (mixed in before the status class)."""

    error_code: str


class ThreadNotFoundError(ThreadError, NotFoundError):
    """404 ``thread_not_found``: no thread is held under ``previous_message_id``
    for this API key (never held, expired, dropped to stay within the store's
    bounds, held by another worker or replica, or another key's)."""

    error_code = "thread_not_found"

    def __init__(self, previous_message_id: str) -> None:
        super().__init__(
            f"thread.previous_message_id: no thread is held for {previous_message_id!r} "
            f"(threads expire, and each server process holds its own); {REPLAY} to start a new thread"
        )


class ThreadAlreadyContinuedError(ThreadError, InvalidRequestError):
    """400 ``thread_already_continued``: each response can be continued once."""

    error_code = "thread_already_continued"

    def __init__(self, previous_message_id: str) -> None:
        super().__init__(
            f"thread.previous_message_id: {previous_message_id!r} has already been continued, and each "
            "response can be continued only once; continue from the thread's most recent response id, or "
            + REPLAY
        )


class ThreadContinueInFlightError(ThreadError, InvalidRequestError):
    """400 ``thread_continue_in_flight``: another request is continuing from
    the same response and has not finished."""

    error_code = "thread_continue_in_flight"

    def __init__(self, previous_message_id: str) -> None:
        super().__init__(
            f"thread.previous_message_id: another request is still continuing from {previous_message_id!r}; "
            "wait for it and continue from its response id, or " + REPLAY
        )


class ThreadFingerprintMismatchError(ThreadError, InvalidRequestError):
    """400 ``thread_fingerprint_mismatch``: a field that must stay the same
    across a thread's turns differs from the thread's; the message names
    each (``differing field(s): model, system``, the list clients parse)."""

    error_code = "thread_fingerprint_mismatch"

    def __init__(self, previous_message_id: str, fields: list[str]) -> None:
        super().__init__(
            f"thread.previous_message_id: {previous_message_id!r}: a field that must stay the same across "
            f"a thread's turns differs from the thread's; differing field(s): {', '.join(fields)}. Leave "
            "system and tools out of a continue (the thread keeps them) and send its model and "
            f"output_config, or {REPLAY} to change them"
        )
        self.fields = fields


class ThreadUnsupportedRequestError(ThreadError, InvalidRequestError):
    """400 ``thread_unsupported_request``: this server does not hold threads
    for this request (``threads.enabled = false``; in a Message Batch, the
    ``errored`` result's message). No ``unsupported`` list: none of the
    API's feature names applies, and the SDKs then send the full
    conversation without ``thread``."""

    error_code = "thread_unsupported_request"

    def __init__(self, reason: str) -> None:
        super().__init__(f"thread: {reason}; send the full conversation without thread")
