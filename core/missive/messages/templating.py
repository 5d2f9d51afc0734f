"""Moved to :mod:`missive.chat_template.rendering`; the name stays for plugins that import it."""

from __future__ import annotations

from ..chat_template.rendering import compile_template, render_prompt, render_segments

__all__ = ["compile_template", "render_prompt", "render_segments"]
