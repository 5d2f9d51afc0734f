"""The ``thread`` and ``diagnostics`` request fields (SDK 2.15:
``anthropic/types/beta/beta_message_thread_param.py``,
``beta_thread_continue_params.py``, ``beta_diagnostics_param.py``).

Validated here for their shape only; what they do is :mod:`missive.threads`'s
(a ``thread`` is checked, with the API's wording, before the body is
validated: :func:`missive.threads.thread.thread_param`).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .blocks import Open

__all__ = ["ThreadCreate", "ThreadContinue", "MessageThread", "Diagnostics"]


class ThreadCreate(Open):
    """``thread: {"type": "create"}``: hold this conversation under the response's id."""

    type: Literal["create"]


class ThreadContinue(Open):
    """``thread: {"type": "continue", "previous_message_id": ...}``: the
    conversation held under that response, then this request's messages."""

    type: Literal["continue"]
    previous_message_id: str


MessageThread = Annotated[ThreadCreate | ThreadContinue, Field(discriminator="type")]


class Diagnostics(Open):
    """``diagnostics``: keep this request's fingerprint; with
    ``previous_message_id``, compare with that request's."""

    previous_message_id: str | None = None
