"""Fixtures of the door's in-process tests: the app of the test module's
``CONFIG`` (:data:`ECHO_MODELS` when it has none), an ``openai`` client and
a raw HTTP client on it, and ``refused``, a 400 through the SDK in OpenAI's terms."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from missive.testing import InProcessApp, in_process_app

#: What no error of these routes holds: the Messages API's words and paths.
MESSAGES_TERMS = ("tool_use", "tool_result", "input_schema", '"any"', "messages.", "tools.", "max_tokens")


_MODES = ["auto", "any", "tool", "none"]
#: Echo models: one with a fallback, tool_choice in every mode, strict tools
#: when forced, no sampling or stop sequences, reasoning, auto only, and one
#: reporting the conversation it gets (images taken).
ECHO_MODELS: dict[str, Any] = {
    "routing": {"default_fallbacks": True},
    "models": {
        "echo": {"driver": "echo", "context_window": 1000},
        "echo-spare": {"driver": "echo", "context_window": 1000, "fallbacks": ["echo"]},
        "echo-tools": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": _MODES}},
        },
        "echo-strict": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": _MODES, "strict_tools": ["any", "tool"]}},
        },
        "echo-fixed": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"sampling": [], "stop_sequences": False}},
        },
        "echo-think": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"thinking": True}},
        },
        "echo-auto": {
            "driver": "echo",
            "context_window": 1000,
            "settings": {"capabilities": {"tool_choice": ["auto"]}},
        },
        "echo-report": {
            "driver": "echo",
            "context_window": 2000,
            "settings": {
                "report": True,
                "capabilities": {"tool_choice": _MODES, "input_media": ["image/png"]},
            },
        },
    },
}


@pytest.fixture(scope="module")
def config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The test module's ``CONFIG``, or :data:`ECHO_MODELS`."""
    return getattr(request.module, "CONFIG", ECHO_MODELS)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def app(config: dict[str, Any]) -> Iterator[InProcessApp]:
    with in_process_app(config) as made:
        yield made


@pytest.fixture(scope="module")
def client(app: InProcessApp) -> openai.OpenAI:
    return openai.OpenAI(base_url=app.url + "/v1", api_key="k", max_retries=0, http_client=app.http_client())


@pytest.fixture(scope="module")
def raw(app: InProcessApp) -> httpx.Client:
    return app.http_client()  # type: ignore[no-any-return]


def _refused(create: Callable[..., Any], **kwargs: Any) -> openai.BadRequestError:
    with pytest.raises(openai.BadRequestError) as caught:
        create(**kwargs)
    error = caught.value
    assert error.status_code == 400 and error.type == "invalid_request_error"
    for word in MESSAGES_TERMS:
        assert word not in error.message, error.message
    return error


@pytest.fixture
def refused() -> Callable[..., openai.BadRequestError]:
    """``refused(create, **kwargs)``: the ``BadRequestError`` that
    ``create(**kwargs)`` raises, checked to be in OpenAI's terms."""
    return _refused
