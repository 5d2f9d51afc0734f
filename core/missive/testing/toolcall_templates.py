"""Placeholder; filled below."""
TEMPLATES: dict[str, str] = {}
