"""The test kit's in-process app (:func:`missive.testing.in_process_app`)
beside the servers of the same test run.

The session keeps one in-process echo app (``tests/conftest.py``'s
``echo_app``) for the whole run, while live servers started by other tests
share the run's state folder: the app must not hold that folder's batch
database, or every later server's batches answer "in use by another
Missive server" (seen in CI: a thread test's batch got a 500).
"""

from __future__ import annotations

import anthropic

from missive.testing import in_process_app, live_server, until

ECHO = {"models": {"echo": {"driver": "echo"}}}
BATCH = [
    {
        "custom_id": "one",
        "params": {"model": "echo", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
    }
]


def test_a_live_server_runs_batches_while_an_in_process_app_holds_its_own() -> None:
    with in_process_app(ECHO) as app:
        local = anthropic.Anthropic(
            base_url=app.url, api_key="unused", max_retries=0, http_client=app.http_client()
        )
        mine = local.messages.batches.create(requests=BATCH)  # type: ignore[arg-type]
        with live_server(ECHO) as url:
            client = anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0)
            batch = client.messages.batches.create(requests=BATCH)  # type: ignore[arg-type]
            ended = until(
                lambda: (b := client.messages.batches.retrieve(batch.id)).processing_status == "ended" and b,
                "the live server's batch ended",
                interval=0.2,
            )
            assert ended.request_counts.succeeded == 1
        # The in-process app's batch is in its own database, and still there.
        assert local.messages.batches.retrieve(mine.id).id == mine.id
