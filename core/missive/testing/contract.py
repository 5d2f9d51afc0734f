"""The shared driver contract (:class:`DriverContract`), run against a
live server through the official SDK."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ['DriverContract']


class DriverContract:
    """The shared contract every driver passes, through the official SDK.

    Subclass it in a driver's tests with the configuration to serve; the
    pytest plugin (:mod:`missive.pytest_plugin`, loaded by pytest wherever
    Missive is installed) starts that server for the class::

        class TestMyDriver(DriverContract):
            model = "my-model"               # the model id to test
            config = {"models": {"my-model": {"driver": "mine"}}}

    or next to a ``contract_url`` fixture of its own, when the configuration
    is known only at run time (a backend's port)::

        @pytest.fixture(scope="module")
        def contract_url(backend):           # base URL of a live server
            with live_server({...}) as url:
                yield url

    Tests that need a capability the model does not declare (read from
    ``missive plugins --json`` semantics: ``GET /v1/models`` for the context,
    the class attributes below for the rest) are skipped with the reason.
    A driver may override a test only with ``pytest.mark.xfail(reason=...)``.

    Attributes:
        model: model id served by ``contract_url``.
        config: the configuration mapping the plugin's ``contract_url``
            serves (unused when a ``contract_url`` fixture replaces it).
        env: more environment variables for that server (e.g.
            ``MISSIVE_PLUGINS`` naming a plugin module not installed yet).
        deterministic: greedy decoding (``temperature: 0``) gives the same
            text for the same prompt (needed by the stop-sequence test).
        exact_count_tokens: ``count_tokens`` equals the prompt usage.
        prompt: a user message the model answers with several words.
    """

    model: str = ""
    config: Mapping[str, Any] | None = None
    env: Mapping[str, str] | None = None
    deterministic: bool = True
    exact_count_tokens: bool = True
    prompt: str = "List three colours of the rainbow."

    #: An app in process (:class:`~missive.testing.InProcessApp`) serving the
    #: contract: set by the plugin's test class (an autouse fixture) when its
    #: ``contract_url`` is that app's ``url``; None: a live server.
    app: Any = None

    def client(self, url: str) -> Any:
        if self.app is not None and url == self.app.url:
            return self.app.sdk(api_key="contract-test", timeout=120)
        import anthropic

        return anthropic.Anthropic(base_url=url, api_key="contract-test", max_retries=0, timeout=120)

    def _kwargs(self, **extra: Any) -> dict[str, Any]:
        return {
            "model": self.model,
            "max_tokens": 40,
            "messages": [{"role": "user", "content": self.prompt}],
            "extra_body": {"temperature": 0.0},
            **extra,
        }

    def test_contract_stream_equals_non_stream(self, contract_url: str) -> None:
        client = self.client(contract_url)
        plain = client.messages.create(**self._kwargs())
        with client.messages.stream(**self._kwargs()) as stream:
            text = "".join(stream.text_stream)
            final = stream.get_final_message()
        assert plain.stop_reason in ("end_turn", "max_tokens", "stop_sequence")
        assert plain.content and plain.content[0].type == "text"
        assert text == final.content[0].text
        if self.deterministic:
            assert final.content[0].text == plain.content[0].text
            assert final.usage.output_tokens == plain.usage.output_tokens
        for usage in (plain.usage, final.usage):
            assert usage.output_tokens > 0
            assert usage.input_tokens + usage.cache_read_input_tokens > 0

    def test_contract_count_tokens_equals_usage(self, contract_url: str) -> None:
        import pytest

        if not self.exact_count_tokens:
            pytest.skip("the driver declares approximate token counts")
        client = self.client(contract_url)
        counted = client.messages.count_tokens(
            model=self.model, messages=[{"role": "user", "content": self.prompt}]
        ).input_tokens
        usage = client.messages.create(**self._kwargs(max_tokens=5)).usage
        assert (
            counted == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens
        )

    def test_contract_max_tokens(self, contract_url: str) -> None:
        msg = self.client(contract_url).messages.create(**self._kwargs(max_tokens=2))
        assert msg.stop_reason == "max_tokens" and msg.usage.output_tokens <= 2

    def test_contract_stop_sequence(self, contract_url: str) -> None:
        import pytest

        if not self.deterministic:
            pytest.skip("the model is not deterministic at temperature 0")
        client = self.client(contract_url)
        full = client.messages.create(**self._kwargs()).content[0].text
        words = full.split()
        if len(words) < 3:
            pytest.skip(f"answer too short to pick a stop sequence: {full!r}")
        stop = words[len(words) // 2]
        msg = client.messages.create(**self._kwargs(stop_sequences=[stop]))
        assert msg.stop_reason == "stop_sequence" and msg.stop_sequence == stop
        assert (msg.content[0].text if msg.content else "") == full[: full.index(stop)]

    def test_contract_prompt_too_long(self, contract_url: str) -> None:
        import anthropic
        import pytest

        client = self.client(contract_url)
        info = client.models.retrieve(self.model)
        context = getattr(info, "max_input_tokens", None)
        if not context:
            pytest.skip("the model does not report its context window")
        text = "hello " * (context + 100)
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.messages.create(**self._kwargs(messages=[{"role": "user", "content": text}]))
        body: Any = caught.value.body  # the SDK types it as object
        message = body["error"]["message"]
        assert message.startswith("prompt is too long: ") and message.endswith(" maximum"), message

    def test_contract_models_listing(self, contract_url: str) -> None:
        listed = [m.id for m in self.client(contract_url).models.list()]
        assert self.model in listed
