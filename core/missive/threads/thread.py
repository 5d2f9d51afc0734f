"""Message threads: a request's ``thread`` field, before validation and after
the answer.

Anthropic docs, "Message threads", and the SDK 2.15 types
(``anthropic/types/beta/beta_message_thread_param.py``,
``anthropic/lib/threads/_thread_state.py``):

* ``{"type": "create"}``: an ordinary request; once its answer is complete
  (``message_stop`` sent, or the whole non-streaming body), the conversation
  with that answer is held under the response's ``id``;
* ``{"type": "continue", "previous_message_id": ID}``: the request carries
  only the messages since that response, and no ``system`` or ``tools`` (the
  thread keeps those of its creation; sent anyway, they must equal them). The
  request is rebuilt as the whole conversation before anything else looks
  at it, so it is validated, rendered and counted exactly as the full
  request would be: the same prompt, the same tokens, the same prefix cache.
  ``messages`` may be empty (the SDK resumes a ``pause_turn`` that way).

Errors (each with ``error.details.error_code``, :mod:`.errors`):
``thread_not_found`` (404: nothing held under that id for this API key),
``thread_already_continued`` (each response continues once),
``thread_continue_in_flight`` (a continue from it is running),
``thread_fingerprint_mismatch`` (``model``, ``output_config`` or
``output_format`` differ from the thread's, which the API keeps fixed across
a thread; or ``system``/``tools`` were sent and differ),
``thread_unsupported_request`` (``threads.enabled = false``). A continue
that fails or is cut off before its answer completes leaves the response it
continued free to be continued again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.errors import InvalidRequestError
from .errors import (
    ThreadAlreadyContinuedError,
    ThreadContinueInFlightError,
    ThreadFingerprintMismatchError,
    ThreadNotFoundError,
    ThreadUnsupportedRequestError,
)
from .fingerprint import same_json
from .store import Kept, ResponseStore, ThreadState

__all__ = ["ThreadTurn", "begin_turn", "thread_param", "FIXED_FIELDS", "CREATE_ONLY_FIELDS"]

#: Fields the API keeps the same across a thread's turns (a continue with
#: another value is ``thread_fingerprint_mismatch``).
FIXED_FIELDS = ("model", "output_config", "output_format")
#: Fields a continue takes from the thread (the SDK's ``CREATE_ONLY_FIELDS``).
CREATE_ONLY_FIELDS = ("system", "tools")


@dataclass
class ThreadTurn:
    """One request's turn of a thread.

    Attributes:
        body: the whole request body (for a continue: rebuilt from the thread).
        previous: for a continue, the entry of the response it continues
            (claimed: ``in_flight``); None for a create.
    """

    body: dict[str, Any]
    previous: Kept | None = None

    def store_reply(self, store: ResponseStore, owner: str, message: dict[str, Any], ttl: float) -> None:
        """Hold the thread with ``message`` (the complete answer) under its id;
        the response it continued is marked continued."""
        state = ThreadState(
            fixed={name: self.body.get(name) for name in FIXED_FIELDS},
            system=self.body.get("system"),
            tools=self.body.get("tools"),
            messages=[*self.body["messages"], {"role": "assistant", "content": message["content"]}],
        )
        previous, self.previous = self.previous, None
        if previous is not None:
            previous.in_flight = False
            previous.continued = True
            store.keep_thread(previous, None, ttl)
        store.keep_thread(store.entry(owner, message["id"]), state, ttl)

    def release(self) -> None:
        """The answer did not complete: the continued response may be continued again."""
        previous, self.previous = self.previous, None
        if previous is not None:
            previous.in_flight = False


def thread_param(body: dict[str, Any]) -> dict[str, Any] | None:
    """The body's ``thread`` (None when absent or null), checked.

    Raises:
        InvalidRequestError: not an object, an unknown ``type``, a continue
            without a ``previous_message_id`` string.
    """
    thread = body.get("thread")
    if thread is None:
        return None
    if not isinstance(thread, dict):
        raise InvalidRequestError("thread: Input should be a valid dictionary or object")
    kind = thread.get("type")
    if kind not in ("create", "continue"):
        raise InvalidRequestError(f"thread.type: Input should be 'create' or 'continue' (got {kind!r})")
    if kind == "continue":
        previous = thread.get("previous_message_id")
        if previous is None:
            raise InvalidRequestError("thread.previous_message_id: Field required")
        if not isinstance(previous, str) or not previous:
            raise InvalidRequestError("thread.previous_message_id: Input should be a non-empty string")
    return thread


def begin_turn(
    body: dict[str, Any], *, store: ResponseStore, owner: str, enabled: bool
) -> tuple[dict[str, Any], ThreadTurn | None]:
    """The body to validate and the request's thread turn (None: no ``thread``).

    A continue is claimed (``in_flight``) until :meth:`ThreadTurn.store_reply`
    or :meth:`ThreadTurn.release`.

    Raises:
        InvalidRequestError: a malformed ``thread`` or ``messages``.
        ThreadUnsupportedRequestError, ThreadNotFoundError,
        ThreadAlreadyContinuedError, ThreadContinueInFlightError,
        ThreadFingerprintMismatchError: see the module doc.
    """
    thread = thread_param(body)
    if thread is None:
        return body, None
    if not enabled:
        raise ThreadUnsupportedRequestError("this server holds no threads (threads.enabled = false)")
    if thread["type"] == "create":
        return body, ThreadTurn(body)
    previous_id = thread["previous_message_id"]
    kept = store.get(owner, previous_id)
    if kept is None or (kept.thread is None and not kept.continued):
        raise ThreadNotFoundError(previous_id)
    if kept.continued:
        raise ThreadAlreadyContinuedError(previous_id)
    if kept.in_flight:
        raise ThreadContinueInFlightError(previous_id)
    held = kept.thread
    assert held is not None
    differing = [
        name
        for name in FIXED_FIELDS
        # A missing model is left to validation ("model: Field required").
        if (name != "model" or "model" in body) and not same_json(body.get(name), held.fixed.get(name))
    ]
    differing += [
        name
        for name in CREATE_ONLY_FIELDS
        if body.get(name) is not None and not same_json(body[name], getattr(held, name))
    ]
    if differing:
        raise ThreadFingerprintMismatchError(previous_id, differing)
    messages = body.get("messages", [])
    if not isinstance(messages, list):
        raise InvalidRequestError("messages: Input should be a valid list")
    full = {**body, "messages": [*held.messages, *messages]}
    for name in CREATE_ONLY_FIELDS:
        value = getattr(held, name)
        if value is None:
            full.pop(name, None)
        else:
            full[name] = value
    kept.in_flight = True
    return full, ThreadTurn(full, kept)
