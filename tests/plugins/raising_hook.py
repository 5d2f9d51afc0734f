"""A plugin whose registration hook raises."""

from missive import hookimpl


@hookimpl
def register_drivers() -> list:
    raise ValueError("cannot register")
