"""The web console's HTTP routes, under ``/console`` (docs/operations.md, "Web console").

* ``GET /console/`` and ``GET /console/static/{file}``: the page, plain
  HTML, CSS and JavaScript files shipped in the package (no build step).
  They hold no data, so they are served without a key: a browser cannot put
  one on a page load. The page asks for the key and sends it as
  ``x-api-key`` on every call;
* ``GET /console/api/config`` (no key): ``{"api_key_required": bool}``, so
  the page asks for a key before its first call rather than after a 401
  (which a 401 on any route tells anyway).

The data calls need an admin key (:func:`console_access`), as
``GET /v1/status`` does:

* ``GET /console/api/status``: what ``GET /v1/status`` answers;
* ``GET /console/api/requests``: the recent requests, newest first,
  filtered (``model``, ``endpoint``, ``status``: ``2xx``, ``4xx``, ``5xx``,
  ``error`` or a code, ``error_type``, ``key``: a key's name; ``subagent``:
  ``true`` for requests a Claude Code subagent made, ``false`` for the
  others; ``agent_id``: the requests of that agent and of the subagents it
  spawned, :mod:`missive.protocol.agents`), ``limit`` of
  them (1-1000, default 100) ``before`` a ``seq`` (the next page);
* ``GET /console/api/requests/{request_id}``: one request, with its
  ``server.capture_dir`` file (body and headers, keys redacted) when
  capture is on and the key asking owns it (:meth:`~missive.keys.ring.Identity.owns`:
  the key that sent it, or an admin key);
* ``GET /console/api/series``: the graphs' points over the last hour, of
  one ``model`` or of all.

The page is a client of the Messages API like any other: the playground
posts to ``/v1/messages``, the batches view uses ``/v1/messages/batches``.
Every ``/console`` request is quiet (:data:`missive.serving.record.QUIET_PREFIXES`):
debug-level log lines, no metrics, not in the recent requests.
``server.console = false`` leaves every route out (404).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from pathlib import Path
from typing import Any

import anyio.to_thread
from quart import Quart, Response, request, send_from_directory

from ...console.history import BUCKET_SECONDS, WINDOW_SECONDS, History
from ...keys.ring import Identity
from ...protocol.errors import InvalidRequestError, NotFoundError
from ..access import keys
from ..services import services
from .common import authenticate_admin, config_kernel_models, page_limit
from .status import status_document

__all__ = ["register", "console_access", "STATIC", "SAMPLE_INTERVAL"]

log = logging.getLogger("missive.console")

#: The page's files (package data: ``pyproject.toml``).
STATIC = Path(__file__).parents[2] / "console" / "static"
#: Seconds between two samples of each model's waiting and running requests.
SAMPLE_INTERVAL = 2.0

#: The page may run its own files only and talk to its own server only; no
#: inline script (every value it shows is set as text, never as HTML).
PAGE_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data: blob:; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",  # revalidated (ETag) on every load: an upgrade shows at once
}
_REQUEST_ID = re.compile(r"^req_[A-Za-z0-9]{1,64}$")
_STATUS_CLASSES = {"2xx": 2, "3xx": 3, "4xx": 4, "5xx": 5}


def console_access() -> Identity:
    """The request's key, which must be an admin key (as for ``GET
    /v1/status``): the one place the console's access is decided.

    Raises:
        AuthenticationError: 401, no key or a wrong one (with keys configured).
        PermissionDeniedError: 403, a user key.
    """
    return authenticate_admin("the web console")


def history() -> History:
    """The app's :class:`~missive.console.history.History`."""
    return services().history


def _with_page_headers(response: Response) -> Response:
    response.headers.update(PAGE_HEADERS)
    return response


async def to_page() -> Response:
    """``/console`` to ``/console/``: the page's links are relative to it
    (so it works under a reverse proxy's path prefix too)."""
    return Response("", status=308, headers={"location": "console/"})


async def page() -> Response:
    return _with_page_headers(await send_from_directory(STATIC, "index.html"))


async def static_file(name: str) -> Response:
    return _with_page_headers(await send_from_directory(STATIC, name))


async def page_config() -> dict[str, Any]:
    return {"api_key_required": keys().ring.required}


async def status() -> dict[str, Any]:
    console_access()
    return await status_document()


def _status_matches(wanted: str, status: Any) -> bool:
    if not wanted:
        return True
    if not isinstance(status, int):
        return False
    if wanted in _STATUS_CLASSES:
        return status // 100 == _STATUS_CLASSES[wanted]
    return str(status) == wanted


def _before() -> int | None:
    raw = request.args.get("before")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        raise InvalidRequestError(f"before: Input should be a valid integer, got {raw!r}") from None


def _flag(name: str) -> bool | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if raw not in ("true", "false"):
        raise InvalidRequestError(f"{name}: expected true or false, got {raw!r}")
    return raw == "true"


def _is_subagent(entry: dict[str, Any]) -> bool:
    return entry.get("agent_id") is not None or entry.get("parent_agent_id") is not None


async def requests() -> dict[str, Any]:
    console_access()
    args = request.args
    limit = page_limit() if "limit" in args else 100
    model, endpoint, error_type = args.get("model"), args.get("endpoint"), args.get("error_type")
    key = args.get("key")
    wanted = args.get("status", "")
    subagent = _flag("subagent")
    agent_id = args.get("agent_id")

    def match(entry: dict[str, Any]) -> bool:
        if model is not None and entry.get("model", "") != model:
            return False
        if endpoint and entry.get("endpoint") != endpoint:
            return False
        if error_type and entry.get("error_type") != error_type:
            return False
        if key is not None and entry.get("key", "") != key:
            return False
        if subagent is not None and subagent != _is_subagent(entry):
            return False
        if agent_id and agent_id not in (entry.get("agent_id"), entry.get("parent_agent_id")):
            return False
        if wanted == "error":
            return entry.get("error_type") is not None
        return _status_matches(wanted, entry.get("status"))

    recent = history().recent
    return {
        "data": recent.select(match, limit, _before()),
        "kept": len(recent),
        "models": recent.values("model"),
        "endpoints": recent.values("endpoint"),
        "error_types": recent.values("error_type"),
        "keys": recent.values("key"),
    }


def _read_capture(directory: str, request_id: str) -> dict[str, Any] | None:
    """The capture file of ``request_id`` (``<time_ns>-<request_id>.json``,
    :mod:`missive.server.capture`), None when there is none. Worker thread."""
    for path in Path(directory).glob(f"*-{request_id}.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("cannot read capture %s: %s", path, exc)
            return None
        return data if isinstance(data, dict) else None
    return None


async def request_detail(request_id: str) -> dict[str, Any]:
    identity = console_access()
    found = history().recent.find(request_id) if _REQUEST_ID.match(request_id) else None
    if found is None:
        raise NotFoundError(f"request_id: {request_id} is not among the recent requests this server keeps")
    entry, sender = found
    config, _, _ = config_kernel_models()
    out: dict[str, Any] = {**entry}
    if not config.server.capture_dir:
        out["capture"] = None
        out["capture_note"] = "no prompt text: request capture (server.capture_dir) is off"
    elif not identity.owns(sender):  # an admin key owns everything, as every batch (missive.keys)
        out["capture"] = None
        out["capture_note"] = "captured, but sent with another API key: only that key sees its body"
    else:
        out["capture"] = await anyio.to_thread.run_sync(_read_capture, config.server.capture_dir, request_id)
        if out["capture"] is None:
            out["capture_note"] = "no capture file for this request (removed, or not written)"
    return out


async def series() -> dict[str, Any]:
    console_access()
    model = request.args.get("model")
    hist = history()
    return {
        "bucket_s": BUCKET_SECONDS,
        "window_s": WINDOW_SECONDS,
        "model": model,
        "models": hist.series.models(),
        "points": hist.series.points(model, hist.clock()),
    }


def sample_load(app: Quart) -> None:
    """Note each served model's waiting and running requests in the graphs' buckets."""
    found = services(app)
    models, gates, hist = found.models, found.admission.gates, found.history
    load = []
    for model_id in models.drivers:
        gate = gates.get(model_id)
        load.append((model_id, gate.waiting if gate else 0, gate.running if gate else 0))
    hist.series.sample(load, hist.clock())


async def _sample_forever(app: Quart) -> None:
    while True:
        try:
            sample_load(app)
        except Exception:  # the console must never take the server down
            log.exception("could not sample the load for the console")
        await asyncio.sleep(SAMPLE_INTERVAL)


def register(app: Quart) -> None:
    """Add the console's routes and its load sampler to ``app`` (nothing
    when ``server.console`` is false)."""
    config = services(app).config
    if not config.server.console:
        return
    app.add_url_rule("/console", "console-redirect", to_page, methods=["GET"])
    app.add_url_rule("/console/", "console-page", page, methods=["GET"])
    app.add_url_rule("/console/static/<name>", "console-static", static_file, methods=["GET"])
    app.add_url_rule("/console/api/config", "console-config", page_config, methods=["GET"])
    app.add_url_rule("/console/api/status", "console-status", status, methods=["GET"])
    app.add_url_rule("/console/api/requests", "console-requests", requests, methods=["GET"])
    app.add_url_rule("/console/api/requests/<request_id>", "console-request", request_detail, methods=["GET"])
    app.add_url_rule("/console/api/series", "console-series", series, methods=["GET"])
    sampling: list[asyncio.Task[None]] = []

    @app.before_serving
    async def _start_sampling() -> None:
        sampling.append(asyncio.ensure_future(_sample_forever(app)))

    @app.after_serving
    async def _stop_sampling() -> None:
        for task in sampling:
            task.cancel()
