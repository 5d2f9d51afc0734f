"""A plugin implementing a hook that does not exist."""

from missive import hookimpl


@hookimpl
def register_spaceships() -> list:
    return []
