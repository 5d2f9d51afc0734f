"""A front door's envelope on the errors the app raises outside its views
(``Gateway.claim``): a 404 or 405 under the paths the door claims, and a
404 on a path no route serves for a request from the door's clients; the
Messages API's own paths, and other clients, keep the core's envelope."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from missive.testing import in_process_app

DOOR = '''
from quart import Blueprint, Response, request
from missive.api import FrontDoorSpec, hookimpl, json_dumps

def _render(error):
    body = {"fake": {"status": error.status, "kind": error.error_type, "message": error.message}}
    return Response(json_dumps(body), status=error.status, content_type="application/json")

def blueprint(gateway):
    bp = Blueprint("fake", __name__)
    gateway.claim(("/fake",), _render, clients=lambda: "x-fake-client" in request.headers)

    async def post():
        return {"ok": True}

    bp.add_url_rule("/fake", "fake", post, methods=["POST"])
    return bp

@hookimpl
def register_front_doors():
    return [FrontDoorSpec(name="fake", factory="fake_claiming_door:blueprint")]
'''


@pytest.fixture(scope="module")
def raw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    folder: Path = tmp_path_factory.mktemp("door")
    (folder / "fake_claiming_door.py").write_text(DOOR)
    sys.path.insert(0, str(folder))
    try:
        config = {"models": {"echo": {"driver": "echo"}}}
        with in_process_app(config, env={"MISSIVE_PLUGINS": "fake_claiming_door"}) as app:
            yield app.http_client()
    finally:
        sys.path.remove(str(folder))


def fake(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["fake"]
    assert error["status"] == status and "request-id" in response.headers
    return error


def core(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body: dict[str, Any] = response.json()
    assert body["type"] == "error" and body["request_id"] == response.headers["request-id"]
    return body


def test_the_door_is_mounted(raw: httpx.Client) -> None:
    assert raw.post("/v1/fake").json() == {"ok": True}


def test_claimed_paths(raw: httpx.Client) -> None:
    wrong = raw.get("/v1/fake")
    error = fake(wrong, 405)
    assert "POST" in wrong.headers["allow"].split(", ")  # in the door's envelope too
    assert error["message"] == "method GET is not allowed on /v1/fake"
    error = fake(raw.get("/v1/v1/fake/x/y"), 404)
    assert error["kind"] == "not_found_error" and error["message"] == "Not found: GET /v1/v1/fake/x/y"
    core(raw.get("/v1/fakes"), 404)  # another path, though it starts the same


def test_claimed_clients(raw: httpx.Client) -> None:
    fake(raw.post("/v1/completions", headers={"x-fake-client": "1"}), 404)
    core(raw.post("/v1/completions"), 404)
    # the core's own path: its envelope, whoever asks
    core(raw.get("/v1/messages", headers={"x-fake-client": "1"}), 405)
