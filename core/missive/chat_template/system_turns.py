"""Mid-conversation ``role: "system"`` messages, kept where they occur.

Clients put system messages inside ``messages`` (Claude Code sends one after
the first user turn on every request, with its environment). Folded into the
leading system prompt, each new one would change the top of the prompt and
every token after it: no prefix cache could hold across turns. So a system
message stays at its position:

* system messages before the first user or assistant message are the
  leading system prompt's (after the top-level ``system``): that is their
  position;
* a later one becomes a :class:`SystemNote` block of a user-side turn
  (:func:`missive.messages.conversation.build_conversation`), merged with the user
  turn it follows or precedes like any consecutive same-role message;
* a renderer whose chat template accepts a system turn at that position
  (:func:`template_accepts_system`, tried once per template) renders it as
  one (:func:`segments`); every other renderer, remote backends included
  (their template is not known here; several refuse a late system message
  with a 400, and rendering them mid-template hurt tool calling in vLLM),
  sees the note's text: the message wrapped in ``<system_message>`` tags,
  a clearly marked system note on the user side. Both keep every earlier
  token where it was.
"""

from __future__ import annotations

from functools import lru_cache

from ..driver.conversation import NOTE_CLOSE, NOTE_OPEN, SystemNote, segments, system_note

__all__ = ["SystemNote", "system_note", "template_accepts_system", "segments", "NOTE_OPEN", "NOTE_CLOSE"]

_PROBE_MARK = "\ue020mid-conversation system\ue021"


@lru_cache(maxsize=16)
def template_accepts_system(template_source: str) -> bool:
    """Whether a chat template renders a system message after the first
    turns, in its place: rendering ``system, user, assistant, system, user``
    neither raises nor drops or moves the late one. Cached per template."""
    from ..protocol.errors import MissiveError
    from .rendering import render_prompt

    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": "A1"},
        {"role": "system", "content": _PROBE_MARK},
        {"role": "user", "content": "U2"},
    ]
    try:
        text = render_prompt(template_source, messages)
    except MissiveError:
        return False
    at = text.find(_PROBE_MARK)
    return text.find("A1") < at < text.find("U2", max(at, 0))
