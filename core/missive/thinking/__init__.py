"""Thinking: what the request asks for, signed thinking blocks, their replay.

* :mod:`.plan` - the request's ``thinking`` and ``output_config.effort`` as one
  :class:`~.plan.ThinkingPlan`, and the chat-template switches it maps to;
* :mod:`.signing` - the server key and the HMAC signatures of thinking blocks;
* :mod:`.replay` - which replayed thinking blocks are kept for the prompt.
"""
