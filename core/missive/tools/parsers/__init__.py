"""Streaming parsers that find tool calls in a model's generated text.

Each format the open models use has one module; they are registered as
default plugins through ``register_tool_parsers`` (see
:mod:`missive.default_plugins.tool_parsers`), so a plugin can add or replace one.
"""
