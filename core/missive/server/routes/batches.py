"""The Message Batches endpoints (:mod:`missive.batches`), in the API's shapes:

* ``POST /v1/messages/batches``: create (body up to ``batches.max_body_bytes``);
* ``GET /v1/messages/batches``: list, newest first, paged with ``limit``
  (1-1000, default 20), ``after_id``, ``before_id``;
* ``GET /v1/messages/batches/{id}``: retrieve;
* ``POST /v1/messages/batches/{id}/cancel``: cancel;
* ``DELETE /v1/messages/batches/{id}``: delete (once ended);
* ``GET /v1/messages/batches/{id}/results``: the results as JSON Lines.

``results_url`` is built from the address the client used (its ``Host``),
so it works through the same name or port the client reached.

A batch belongs to the key that created it (issue 32): another user key
gets 404 for it on every endpoint and does not list it; admin keys see all.
"""

from __future__ import annotations

from typing import Any

from quart import Quart, Response, request

from ...batches.service import Batches
from ...protocol.errors import InvalidRequestError
from ..services import services
from .common import api_version, authenticate, note_betas, page_limit, read_raw_body

__all__ = ["register"]


def batches() -> Batches:
    """The app's :class:`~missive.batches.service.Batches`."""
    return services().batches


def _base_url() -> str:
    return request.host_url


async def create_batch() -> dict[str, Any]:
    identity = authenticate()
    raw = await read_raw_body()
    version = api_version()
    if version and services().config.server.strict:
        raise InvalidRequestError("strict mode: this server does not support: " + ", ".join(version))
    note_betas(version)
    return await batches().create(raw, _base_url(), identity)


async def list_batches() -> dict[str, Any]:
    identity = authenticate()
    return await batches().page(
        page_limit(), request.args.get("after_id"), request.args.get("before_id"), _base_url(), identity
    )


async def retrieve_batch(batch_id: str) -> dict[str, Any]:
    identity = authenticate()
    return await batches().retrieve(batch_id, _base_url(), identity)


async def cancel_batch(batch_id: str) -> dict[str, Any]:
    identity = authenticate()
    return await batches().cancel(batch_id, _base_url(), identity)


async def delete_batch(batch_id: str) -> dict[str, str]:
    identity = authenticate()
    return await batches().delete(batch_id, identity)


async def batch_results(batch_id: str) -> Response:
    identity = authenticate()
    lines = await batches().results(batch_id, identity)
    response = Response(lines, content_type="application/x-jsonl")
    response.timeout = None
    return response


def register(app: Quart, prefix: str) -> None:
    base = f"{prefix}/messages/batches"
    app.add_url_rule(base, f"{prefix}-batches-create", create_batch, methods=["POST"])
    app.add_url_rule(base, f"{prefix}-batches-list", list_batches, methods=["GET"])
    app.add_url_rule(f"{base}/<batch_id>", f"{prefix}-batches-retrieve", retrieve_batch, methods=["GET"])
    app.add_url_rule(f"{base}/<batch_id>", f"{prefix}-batches-delete", delete_batch, methods=["DELETE"])
    app.add_url_rule(f"{base}/<batch_id>/cancel", f"{prefix}-batches-cancel", cancel_batch, methods=["POST"])
    app.add_url_rule(
        f"{base}/<batch_id>/results", f"{prefix}-batches-results", batch_results, methods=["GET"]
    )
