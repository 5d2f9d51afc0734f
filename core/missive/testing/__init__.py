"""Test helpers for Missive and for plugin authors.

:func:`live_server` runs a real ``missive serve`` in a subprocess on a free
loopback port, so tests talk to it through real clients (the official
``anthropic`` SDK, httpx) exactly as users do::

    with live_server({"models": {"echo": {"driver": "echo"}}}) as url:
        client = anthropic.Anthropic(base_url=url, api_key="test")

:func:`in_process_app` runs the same app in this process, for API tests
that need no socket. The helpers live in modules by job (:mod:`.servers`,
:mod:`.in_process`, :mod:`.held`, :mod:`.poll`, :mod:`.processes`, :mod:`.generators`,
:mod:`.contract`, :mod:`.driver_units`, :mod:`.templates`, :mod:`.hub`,
:mod:`.usage`);
every public name is importable from ``missive.testing`` itself.
"""

from __future__ import annotations

from .contract import DriverContract
from .driver_units import check_order, collect_events, generation_request, text_of
from .generators import FINALIZED_MARK, GENERATOR_ERRORS, finalized_generators, watch_async_generators
from .held import HeldRequest
from .in_process import InProcessApp, in_process_app, sdk_http
from .poll import until, wait_until
from .processes import open_fds, rss_mib, tcp_states
from .servers import (
    ClosedPort,
    ServerProcess,
    closed_port,
    dump_toml,
    free_port,
    live_server,
    serve_process,
    start_http_server,
    stop_http_server,
    stop_process,
    tests_state_home,
)
from .templates import HARMONY_FEWSHOT, THINKING_CHATML
from .usage import ask_counted

__all__ = [
    "HeldRequest",
    "ask_counted",
    "in_process_app",
    "InProcessApp",
    "sdk_http",
    "free_port",
    "closed_port",
    "ClosedPort",
    "dump_toml",
    "live_server",
    "serve_process",
    "ServerProcess",
    "DriverContract",
    "generation_request",
    "collect_events",
    "text_of",
    "check_order",
    "THINKING_CHATML",
    "HARMONY_FEWSHOT",
    "start_http_server",
    "stop_http_server",
    "stop_process",
    "open_fds",
    "rss_mib",
    "tcp_states",
    "wait_until",
    "until",
    "watch_async_generators",
    "finalized_generators",
    "GENERATOR_ERRORS",
    "FINALIZED_MARK",
    "tests_state_home",
]
