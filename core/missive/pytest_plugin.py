"""The pytest plugin of Missive: its test kit for any project, with no copying.

Installed with the core (entry point ``missive`` in the ``pytest11`` group),
so pytest loads it in every project whose environment has Missive; a test
file then needs nothing but imports from :mod:`missive.testing`. It adds:

* the ``contract_url`` fixture (class scope) that
  :class:`~missive.testing.DriverContract` asks for, built from the test
  class's ``config`` (and ``env``) attributes: a live ``missive serve``
  with that configuration, stopped after the class. A ``contract_url``
  fixture of the test module or a conftest replaces it (for a configuration
  known only at run time, such as a backend's port);
* the ``missive_server`` fixture: a factory starting live servers
  (:func:`missive.testing.serve_process`), all stopped after the test;
* a line in pytest's header naming the Missive version and the drivers and
  plugins it finds (and those that failed to load), so a test run shows
  whether the driver under test is installed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import ExitStack
from typing import Any

import pytest

from .testing import ServerProcess, serve_process

__all__ = ["contract_url", "missive_server", "pytest_report_header"]


def pytest_report_header(config: pytest.Config) -> str:
    """``missive X.Y.Z: drivers a, b; plugins failed: p (error)``, from the
    plugin kernel as ``missive serve`` would load it."""
    from . import __version__
    from .kernel.plugins import Kernel

    try:
        kernel = Kernel()
    except Exception as exc:  # the header must never break a test run
        return f"missive {__version__}: plugins could not be loaded ({type(exc).__name__}: {exc})"
    line = f"missive {__version__}: drivers {', '.join(sorted(kernel.drivers)) or 'none'}"
    found = [
        f"{p.name} {p.version or ''}".rstrip()
        for p in kernel.plugins
        if p.source == "entry point" and not p.error
    ]
    if found:
        line += f"; plugins {', '.join(found)}"
    failed = [f"{p.name} ({p.error})" for p in kernel.plugins if p.error]
    if failed:
        line += f"; failed to load: {', '.join(failed)}"
    return line


@pytest.fixture(scope="class")
def contract_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """Base URL of a live server for a :class:`~missive.testing.DriverContract`
    subclass, configured by the class's ``config`` (a config mapping, as
    ``missive.toml`` would hold it) and ``env`` (more environment variables,
    e.g. ``{"MISSIVE_PLUGINS": "my_driver.plugin"}`` before the
    distribution is installed).

    Fails (a test error) when the class sets no ``config``, or when the
    server does not start (its log is in the message).
    """
    config = getattr(request.cls, "config", None)
    if config is None:
        pytest.fail(
            f"{request.node.nodeid}: set `config` on the DriverContract subclass "
            "(the models to serve) or define a `contract_url` fixture",
            pytrace=False,
        )
    with serve_process(config, env=getattr(request.cls, "env", None)) as server:
        yield server.url


@pytest.fixture
def missive_server() -> Iterator[Any]:
    """A factory of live servers: ``missive_server(config, *, args=(),
    env=None, timeout=120.0)`` starts ``missive serve`` with the
    configuration mapping (None: no config file) and returns the
    :class:`~missive.testing.ServerProcess` (``.url``, ``.log()``) once
    ``/health`` answers; every server it started is stopped after the test.

    Raises: RuntimeError (from the factory) when the server exits or is not
    healthy within ``timeout`` seconds, with its log.
    """
    with ExitStack() as stack:

        def start(
            config: Mapping[str, Any] | None = None,
            *,
            args: tuple[str, ...] = (),
            env: Mapping[str, str] | None = None,
            timeout: float = 120.0,
        ) -> ServerProcess:
            return stack.enter_context(serve_process(config, args=args, env=env, timeout=timeout))

        yield start
