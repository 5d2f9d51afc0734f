"""Reasoning parsers: the model's chain of thought separated from its answer.

Registered through the ``register_reasoning_parsers`` hook (built-ins in
:mod:`missive.default_plugins.reasoning_parsers`); chosen per model from its
chat template (:mod:`.selection`) or a driver setting; applied by the core
(:mod:`missive.messages.stream`) to the text of drivers that render prompts
themselves. Remote backends that separate reasoning (``reasoning_content``,
Ollama's ``thinking``) need none: their drivers yield thinking deltas.
"""
