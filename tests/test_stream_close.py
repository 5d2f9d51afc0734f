"""A streamed answer's body closed by Quart at a frame ends its pump task
before it closes the driver (core/missive/routes/messages.py, issue 16).

When a client goes, Quart closes the response body (``aclose()``, in the
request's task). The body may then be suspended at a frame it yielded while
:func:`missive.protocol.sse.paced`'s pump task is inside the driver's generator,
waiting for the model. The body must close ``paced`` first (which cancels
the pump and waits for it), and only then the driver's generator: closing
that generator while the pump still runs it raised ``aclose(): asynchronous
generator is already running``, and left ``paced`` to the garbage collector.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import pytest
from quart import g

from missive.config import Config
from missive.server.app import create_app
from missive.server.services import services
from missive.serving.record import CLIENT_GONE
from missive_echo import script


@pytest.mark.anyio
async def test_closing_the_body_mid_answer_stops_the_pump_then_the_driver() -> None:
    """A stream whose model is silent for 30 s after its first word: the
    body, closed right after that word's frame (the pump is then waiting
    inside the driver), closes without error and at once; the slot is
    freed, the pump task is over and the answer is recorded as left by
    its client."""
    config = Config.model_validate({"server": {"ping_interval": 60}, "models": {"echo": {"driver": "echo"}}})
    app = create_app(config)
    models = services(app).models
    admission = services(app).admission
    body: dict[str, Any] = {
        "model": "echo",
        "max_tokens": 20,
        "stream": True,
        "messages": [{"role": "user", "content": script({"text": "first"}, {"sleep": 30}, {"text": "late"})}],
    }
    await models.start()
    try:
        async with app.test_request_context("/v1/messages", method="POST", json=body):
            assert await app.preprocess_request() is None
            response = await app.dispatch_request()
            frames = response.response.iter
            before = asyncio.all_tasks()
            seen = b""
            with anyio.fail_after(10):
                while b'"text":"first"' not in seen:
                    seen += await frames.__anext__()
                await asyncio.sleep(0.2)  # the pump is inside the driver's 30 s silence
                assert admission.totals()["generating"] == 1
                await frames.aclose()
            assert admission.totals()["generating"] == 0
            assert not [t for t in asyncio.all_tasks() - before if not t.done()]
            assert b"late" not in seen
            record = g.record
            assert record.finished and record.status == 200 and record.error_type == CLIENT_GONE
    finally:
        await models.aclose()
