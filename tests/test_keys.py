"""API keys as identities (issue 32, core/missive/keys/) through a live
server on the echo driver and the official SDK: each key sees only its own
message batches on every batch endpoint (the issue's scenario with two
plain ``server.api_keys``), admin keys see all, rows from before owners
were kept are admin-only, user keys get 403 on the admin routes, a key's
``models`` hide the others as if absent, and the access log names the key
by name, never by value or hash.

The tests run on the app in process (``server``, no socket), but for the
access log's test: what the process writes is the point, so it starts a
live server of its own.

Limits are in tests/test_keys_limits.py, usage in tests/test_keys_usage.py,
a flood of bad keys in tests/test_keys_flood.py, units in
tests/test_keys_units.py.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from missive.config.keys import derived_name
from missive.testing import InProcessApp, ServerProcess, in_process_app, serve_process

DEADLINE = 60.0  # seconds; only reached when a test fails
ALICE, BOB, ADMIN, NARROW = "alice-key", "bob-key", "sk-admin-test-key", "sk-narrow-test-key"
PRIVATE = "What is the name of my doctor, Dr. Zebediah Quaglione?"


def sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


CONFIG: dict[str, Any] = {
    "server": {"api_keys": [ALICE, BOB]},
    "keys": {
        "ops": {"key_sha256": sha256(ADMIN), "scope": "admin"},
        "narrow": {"key_sha256": sha256(NARROW), "models": ["echo", "echo-?"]},
        "gone": {"key_sha256": sha256("sk-disabled-key"), "enabled": False},
    },
    "models": {
        "echo": {"driver": "echo", "context_window": 1000},
        "echo-2": {"driver": "echo", "context_window": 1000},
        "private": {"driver": "echo", "context_window": 1000, "aliases": ["claude-*"]},
    },
}


@pytest.fixture(scope="module")
def server() -> Iterator[InProcessApp]:
    """The app of ``CONFIG`` in process (its own batch database)."""
    with in_process_app(CONFIG) as app:
        yield app


def client(server: InProcessApp | ServerProcess, key: str) -> anthropic.Anthropic:
    if isinstance(server, InProcessApp):
        return server.sdk(api_key=key, timeout=DEADLINE)
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=DEADLINE)


def ask(custom_id: str, text: str, model: str = "echo") -> dict[str, Any]:
    return {
        "custom_id": custom_id,
        "params": {"model": model, "max_tokens": 50, "messages": [{"role": "user", "content": text}]},
    }


def wait_ended(api: anthropic.Anthropic, batch_id: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while (batch := api.messages.batches.retrieve(batch_id)).processing_status != "ended":
        assert time.monotonic() < deadline, f"batch still {batch.processing_status}"
        time.sleep(0.05)
    return batch


def not_found(call: Any) -> str:
    with pytest.raises(anthropic.NotFoundError) as info:
        call()
    body = info.value.body
    assert isinstance(body, dict) and body["type"] == "error" and body["error"]["type"] == "not_found_error"
    return str(body["error"]["message"])


def test_the_issues_scenario_bob_cannot_reach_alices_batch(server: InProcessApp) -> None:
    """Alice creates a batch whose request holds a private question; Bob,
    with his own key of the same server.api_keys list, does not list it,
    and retrieve, results, cancel and delete of it answer 404 as for a batch
    that does not exist; Alice still reads its answer."""
    alice, bob = client(server, ALICE), client(server, BOB)
    batch = alice.messages.batches.create(requests=[ask("secret", PRIVATE)])
    wait_ended(alice, batch.id)

    assert batch.id not in [b.id for b in bob.messages.batches.list(limit=100)]
    unknown = not_found(lambda: bob.messages.batches.retrieve("msgbatch_doesnotexist0000000000"))
    assert not_found(lambda: bob.messages.batches.retrieve(batch.id)) == unknown.replace(
        "msgbatch_doesnotexist0000000000", batch.id
    )
    not_found(lambda: list(bob.messages.batches.results(batch.id)))
    not_found(lambda: bob.messages.batches.cancel(batch.id))
    not_found(lambda: bob.messages.batches.delete(batch.id))
    # The raw results endpoint too (no SDK retrieve first): nothing of the answer.
    raw = server.http_client().get(
        f"/v1/messages/batches/{batch.id}/results", headers={"x-api-key": BOB}, timeout=10
    )
    assert raw.status_code == 404 and "Zebediah" not in raw.text

    [result] = list(alice.messages.batches.results(batch.id))
    assert result.result.type == "succeeded"
    assert "Zebediah" in result.result.message.content[0].text
    assert alice.messages.batches.retrieve(batch.id).id == batch.id  # not deleted by Bob's attempt


def test_two_different_keys_in_repeated_headers_are_refused(server: InProcessApp) -> None:
    """Alice's and Bob's keys in two ``x-api-key`` headers (or two Bearer
    ``Authorization`` headers), in either order: a 401, so no batch is
    created for whichever came first (found by a newcomer)."""
    http = server.http_client()
    body = {"requests": [ask("who", "hi")]}
    for name, values in (
        ("x-api-key", (ALICE, BOB)),
        ("authorization", (f"Bearer {ALICE}", f"Bearer {BOB}")),
    ):
        for pair in (values, values[::-1]):
            response = http.post(
                "/v1/messages/batches", json=body, headers=[(name, pair[0]), (name, pair[1])], timeout=10
            )
            assert response.status_code == 401, response.text
            error = response.json()["error"]
            assert error["type"] == "authentication_error"
            assert error["message"] == f"the request sends 2 different {name} headers; send one key"


def test_listing_shows_each_key_its_own_and_cursors_stay_within_it(server: InProcessApp) -> None:
    """Each key lists its own batches only, paging included: another key's
    batch id is no cursor (an empty page, as an unknown id)."""
    alice, bob = client(server, ALICE), client(server, BOB)
    mine = [alice.messages.batches.create(requests=[ask(f"a{i}", "hello")]).id for i in range(3)]
    theirs = bob.messages.batches.create(requests=[ask("b", "hello")]).id
    listed_by_alice = [b.id for b in alice.messages.batches.list(limit=100)]
    assert set(mine) <= set(listed_by_alice) and theirs not in listed_by_alice
    assert [b.id for b in bob.messages.batches.list(limit=100)] == [theirs]
    # Pages of one: the SDK follows after_id through Alice's batches only.
    paged = [b.id for b in alice.messages.batches.list(limit=1)]
    assert paged == listed_by_alice
    http = server.http_client()
    page = http.get("/v1/messages/batches", params={"after_id": mine[-1]}, headers={"x-api-key": BOB}).json()
    assert page == {"data": [], "has_more": False, "first_id": None, "last_id": None}
    for batch_id in [*mine, theirs]:
        wait_ended(client(server, ADMIN), batch_id)


def test_admin_keys_see_cancel_and_delete_every_batch(server: InProcessApp) -> None:
    alice, admin = client(server, ALICE), client(server, ADMIN)
    batch = alice.messages.batches.create(requests=[ask("for-admin", PRIVATE)])
    assert batch.id in [b.id for b in admin.messages.batches.list(limit=100)]
    assert admin.messages.batches.retrieve(batch.id).id == batch.id
    admin.messages.batches.cancel(batch.id)
    wait_ended(admin, batch.id)
    list(admin.messages.batches.results(batch.id))
    assert admin.messages.batches.delete(batch.id).id == batch.id
    not_found(lambda: alice.messages.batches.retrieve(batch.id))


def test_user_keys_get_403_on_admin_routes(server: InProcessApp) -> None:
    """/v1/status, /metrics and /v1/usage answer a user key 403
    permission_error in the API's envelope, a bad key 401, an admin key 200."""
    for path in ("/v1/status", "/metrics", "/v1/usage", "/v1/v1/status"):
        for key, status, kind in (
            (ALICE, 403, "permission_error"),
            ("sk-wrong", 401, "authentication_error"),
        ):
            answer = server.http_client().get(path, headers={"x-api-key": key}, timeout=10)
            body = answer.json()
            assert (answer.status_code, body["type"], body["error"]["type"]) == (status, "error", kind), path
            assert body["request_id"] == answer.headers["request-id"]
        admin = server.http_client().get(path, headers={"authorization": f"Bearer {ADMIN}"}, timeout=10)
        assert admin.status_code == 200, (path, admin.text)
    denied = server.http_client().get("/v1/status", headers={"x-api-key": ALICE}, timeout=10).json()
    assert "admin key" in denied["error"]["message"] and ALICE not in denied["error"]["message"]


def test_a_disabled_key_is_refused(server: InProcessApp) -> None:
    answer = server.http_client().get("/v1/models", headers={"x-api-key": "sk-disabled-key"}, timeout=10)
    assert answer.status_code == 401 and "disabled" in answer.json()["error"]["message"]


def test_a_keys_models_hide_the_others_as_if_absent(server: InProcessApp) -> None:
    """A key with ``models = ["echo", "echo-?"]`` lists those only; any other
    model, by id or through an alias, answers 404 ``model: {id}`` on
    messages, count_tokens and the models endpoints, and a batch request
    for it gets the errored result an absent model gets."""
    narrow, admin = client(server, NARROW), client(server, ADMIN)
    assert [m.id for m in narrow.models.list()] == ["echo", "echo-2"]
    assert {m.id for m in admin.models.list()} >= {"echo", "echo-2", "private"}
    assert (
        narrow.messages.create(model="echo-2", max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        .content[0]
        .text
        == "hi"
    )
    absent = not_found(
        lambda: narrow.messages.create(
            model="no-such-model", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
        )
    )
    for model in ("private", "claude-sonnet-4-5"):
        message = not_found(
            lambda model=model: narrow.messages.create(
                model=model, max_tokens=5, messages=[{"role": "user", "content": "hi"}]
            )
        )
        assert message == absent.replace("no-such-model", model)
        not_found(
            lambda model=model: narrow.messages.count_tokens(
                model=model, messages=[{"role": "user", "content": "hi"}]
            )
        )
        not_found(lambda model=model: narrow.models.retrieve(model))
    stream = server.http_client().post(
        "/v1/messages",
        headers={"x-api-key": NARROW},
        timeout=10,
        json={
            "model": "private",
            "max_tokens": 5,
            "stream": True,
            "messages": [{"role": "user", "content": "hi"}],
        },
    )
    assert stream.status_code == 404 and stream.json()["error"]["message"] == "model: private"

    batch = narrow.messages.batches.create(requests=[ask("ok", "fine"), ask("hidden", "no", model="private")])
    wait_ended(narrow, batch.id)
    results = {r.custom_id: r.result for r in narrow.messages.batches.results(batch.id)}
    assert results["ok"].type == "succeeded"
    assert results["hidden"].type == "errored"
    assert results["hidden"].error.error.type == "not_found_error"
    assert results["hidden"].error.error.message == "model: private"


def test_the_access_log_names_the_key_never_its_value_or_hash(tmp_path: Path) -> None:
    """Each request's line says ``key=<name>`` (the derived name of a plain
    key); no key value, and no key's SHA-256, is ever written. (A live
    server of its own: the log the process writes is the point.)"""
    with serve_process(CONFIG, env={"MISSIVE_STATE_DIR": str(tmp_path)}) as server:
        check_access_log(server)


def check_access_log(server: ServerProcess) -> None:
    client(server, ALICE).messages.create(
        model="echo", max_tokens=5, messages=[{"role": "user", "content": "x"}]
    )
    client(server, ADMIN).models.list()
    httpx.get(f"{server.url}/v1/models", headers={"x-api-key": "sk-some-wrong-key"}, timeout=10)
    log = server.log()
    lines = [line for line in log.splitlines() if "missive.access" in line]
    assert any("POST /v1/messages 200" in line and f"key={derived_name(ALICE)}" in line for line in lines)
    assert any("GET /v1/models 200" in line and " key=ops" in line for line in lines)
    refused = [line for line in lines if "GET /v1/models 401" in line]
    assert refused and all("key=" not in line for line in refused)
    for secret in (ALICE, BOB, ADMIN, NARROW, "sk-some-wrong-key", "sk-disabled-key"):
        assert secret not in log and sha256(secret) not in log


OLD_SCHEMA = """
CREATE TABLE batches (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL UNIQUE, created_at REAL NOT NULL,
    expires_at REAL NOT NULL, ended_at REAL, cancel_initiated_at REAL, archived_at REAL, total INTEGER NOT NULL,
    succeeded INTEGER NOT NULL DEFAULT 0, errored INTEGER NOT NULL DEFAULT 0, canceled INTEGER NOT NULL DEFAULT 0,
    expired INTEGER NOT NULL DEFAULT 0);
CREATE TABLE requests (batch_seq INTEGER NOT NULL REFERENCES batches(seq) ON DELETE CASCADE, idx INTEGER NOT NULL,
    custom_id TEXT NOT NULL, model TEXT, params TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'pending', result TEXT,
    PRIMARY KEY (batch_seq, idx));
"""  # noqa: E501 - an earlier release's schema, as it wrote it


def test_batches_from_before_owners_are_for_admin_keys_only(tmp_path: Path) -> None:
    """A database written before batches had owners (its schema as it was)
    opens, its batch rows gain an empty owner, and only admin keys list and
    read them; a user key gets 404."""
    now = time.time()
    with sqlite3.connect(tmp_path / "batches.sqlite3") as db:
        db.executescript(OLD_SCHEMA)
        db.execute(
            "INSERT INTO batches (id, created_at, expires_at, ended_at, total, succeeded) "
            "VALUES ('msgbatch_old000000000000000000', ?, ?, ?, 1, 1)",
            (now, now + 86400, now),
        )
        result = {
            "type": "succeeded",
            "message": {
                "id": "msg_old",
                "type": "message",
                "role": "assistant",
                "model": "echo",
                "content": [{"type": "text", "text": "old answer"}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": {"input_tokens": 1, "output_tokens": 2},
            },
        }
        db.execute(
            "INSERT INTO requests VALUES (1, 0, 'old', 'echo', '{}', 'succeeded', ?)", (json.dumps(result),)
        )
    with in_process_app(CONFIG, state_dir=tmp_path) as app:
        alice, admin = client(app, ALICE), client(app, ADMIN)
        assert [b.id for b in alice.messages.batches.list()] == []
        not_found(lambda: alice.messages.batches.retrieve("msgbatch_old000000000000000000"))
        not_found(lambda: list(alice.messages.batches.results("msgbatch_old000000000000000000")))
        assert [b.id for b in admin.messages.batches.list()] == ["msgbatch_old000000000000000000"]
        [line] = list(admin.messages.batches.results("msgbatch_old000000000000000000"))
        assert line.result.message.content[0].text == "old answer"
