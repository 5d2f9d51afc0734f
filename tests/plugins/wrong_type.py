"""A plugin returning something that is not a DriverSpec."""

from missive import hookimpl


@hookimpl
def register_drivers() -> list:
    return ["not a spec"]
