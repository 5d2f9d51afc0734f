"""``GET /v1/models`` and ``GET /v1/models/{id}`` in the API's shape (contract section 6).

The listing pages with ``limit`` (1-1000, default 20), ``after_id`` and
``before_id`` and always sends ``has_more``, ``first_id`` and ``last_id``
(the SDK's auto-pagination stops only on ``has_more: false``).

Each model carries ``capabilities`` and ``lifecycle`` as the API always
sends them (:mod:`missive.models.capabilities`).

A model that shares another's load (its driver's ``settings.base``:
:mod:`missive.models.bases`) says which in ``shares_weights_with``.

Aliases written as plain ids (no glob characters), such as
``claude-local``, are listed too, after the configured models: Claude Code
keeps only ids containing ``claude`` in its model picker (contract section 6).
"""

from __future__ import annotations

from typing import Any

from quart import Quart, request

from ...driver.interface import Driver
from ...keys.ring import Identity
from ...models.capabilities import lifecycle_fields, model_capabilities
from ...protocol.errors import InvalidRequestError
from .common import authenticate, config_kernel_models, page_limit, record, resolve_for


def _model_object(
    model_id: str, driver: Driver, identity: Identity, shown_id: str | None = None
) -> dict[str, Any]:
    entry = driver.entry
    created = entry.created_at.isoformat().replace("+00:00", "Z")
    obj: dict[str, Any] = {
        "type": "model",
        "id": shown_id or model_id,
        "display_name": entry.display_name or model_id,
        "created_at": created,
    }
    context = driver.context_window
    if context is not None:
        obj["max_input_tokens"] = context
    if entry.max_output_tokens is not None or context is not None:
        obj["max_tokens"] = entry.max_output_tokens or context
    config, _, models = config_kernel_models()
    obj["capabilities"] = model_capabilities(
        driver.capabilities,
        entry,
        batches=config.batches.enabled,
        web_search=config.server_tools.web_search is not None,
    )
    obj.update(lifecycle_fields(entry))
    if driver.base is not None:
        # It runs on that model's loaded weights and context (settings.base: missive.models.bases).
        obj["shares_weights_with"] = driver.base
    obj["line"] = None  # no Claude model line (the API: "do not infer a line from the id")
    # Any other served model the key may use can be a `fallbacks` entry (missive.routing.chain).
    obj["allowed_fallback_models"] = [m for m in models.drivers if m != model_id and identity.may_use(m)]
    return obj


def _listed(models: Any) -> dict[str, str]:
    """Shown id -> configured model id: every model, then its literal aliases."""
    listed = {model_id: model_id for model_id in models.drivers}
    for model_id, driver in models.drivers.items():
        for alias in driver.entry.aliases:
            if not any(c in alias for c in "*?[") and alias not in listed:
                listed[alias] = model_id
    return listed


async def list_models() -> dict[str, Any]:
    identity = authenticate()
    _, _, models = config_kernel_models()
    # A key lists only the models it may use (issue 32).
    listed = {shown: mid for shown, mid in _listed(models).items() if identity.may_use(mid)}
    ids = list(listed)
    limit = page_limit()
    after, before = request.args.get("after_id"), request.args.get("before_id")
    for name, value in (("after_id", after), ("before_id", before)):
        if value is not None and value not in ids:
            raise InvalidRequestError(f"{name}: no model with id {value!r}")
    if before is not None:
        end = ids.index(before)
        start = max(0, end - limit)
        page, has_more = ids[start:end], start > 0
    else:
        start = ids.index(after) + 1 if after is not None else 0
        page, has_more = ids[start : start + limit], start + limit < len(ids)
    data = [_model_object(listed[mid], models.drivers[listed[mid]], identity, shown_id=mid) for mid in page]
    return {
        "data": data,
        "has_more": has_more,
        "first_id": page[0] if page else None,
        "last_id": page[-1] if page else None,
    }


async def get_model(model_id: str) -> dict[str, Any]:
    identity = authenticate()
    _, _, models = config_kernel_models()
    resolved = resolve_for(identity, model_id)
    driver = models.drivers[resolved]
    record().model = resolved
    return _model_object(resolved, driver, identity, shown_id=model_id)


def register(app: Quart, prefix: str) -> None:
    app.add_url_rule(f"{prefix}/models", f"{prefix}-models", list_models, methods=["GET"])
    app.add_url_rule(f"{prefix}/models/<path:model_id>", f"{prefix}-model", get_model, methods=["GET"])
