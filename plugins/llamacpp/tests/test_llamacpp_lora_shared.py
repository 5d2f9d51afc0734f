"""LoRA adapters chosen per request by model id (issue 43): a model entry
with ``settings.base`` shares another entry's load and adds its own
adapters (:mod:`missive_llamacpp.shared`).

The test kit's tiny random-weight Llama and a random LoRA adapter for its
output layer (:func:`missive_llamacpp.testing_gguf.write_tiny_lora`). One
live ``missive serve`` serves ``plain`` (the GGUF, two slots), ``style``
(``base = "plain"`` with the adapter), and, loaded separately for
reference, ``lora1`` (the GGUF with the adapter as its own
``settings.lora``) and ``alone`` (the GGUF without one). Through the SDK,
greedy: ``style`` answers as ``lora1``, ``plain`` as ``alone``, before
and after the other's requests, alone and in concurrent streams (then
decoded in steps of one adapter set: ``lora_split_steps`` counts the steps
that made the other set wait); a second turn through each reads only its
own prefix from the cache, never the other's (their first turns are the
same tokens). Misconfigurations stop start-up naming the setting.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest
from tiny_served import entry, greedy, lora_files

from missive.config import ConfigError
from missive.testing import ServerProcess, in_process_app, serve_process

pytest.importorskip("gguf", reason="the llamacpp plugin's test extra")

QUESTION = "Weather in Lyon? " * 12


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return lora_files(tmp_path_factory.mktemp("lora-shared"))


def shared(base: str, **settings: Any) -> dict[str, Any]:
    return {"driver": "llamacpp", "settings": {"base": base, **settings}}


@pytest.fixture(scope="module")
def server(files: dict[str, Path]) -> Iterator[ServerProcess]:
    adapter = str(files["adapter"])
    config = {
        "models": {
            "style": shared("plain", lora=[{"path": adapter, "scale": 1.0}]),  # listed before its base
            "plain": entry(files["base"], parallel=2),
            "lora1": entry(files["base"], lora=adapter),
            "alone": entry(files["base"]),
        }
    }
    with serve_process(config, timeout=300) as server:
        yield server


def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key="unused", max_retries=0, timeout=300)


def ask(server: ServerProcess, model: str, messages: list[dict[str, Any]], max_tokens: int = 8) -> Any:
    return client(server).messages.create(
        model=model, max_tokens=max_tokens, extra_body={"temperature": 0.0}, messages=messages
    )


def text(msg: Any) -> str:
    return "".join(b.text for b in msg.content if b.type == "text")


def stream(server: ServerProcess, model: str, max_tokens: int) -> str:
    with client(server).messages.stream(
        model=model,
        max_tokens=max_tokens,
        extra_body={"temperature": 0.0},
        messages=[{"role": "user", "content": QUESTION}],
    ) as events:
        return "".join(events.text_stream)


def status(server: ServerProcess, model: str) -> dict[str, Any]:
    body = httpx.get(f"{server.url}/v1/status", timeout=10).json()
    models = body["models"]
    found = models[model] if isinstance(models, dict) else next(m for m in models if m.get("id") == model)
    return dict(found.get("driver_status", found))


def test_each_entry_answers_through_its_own_adapters(server: ServerProcess) -> None:
    plain, style = greedy(server, "plain"), greedy(server, "style")
    assert plain and plain == greedy(server, "alone")  # the base: no adapter
    assert style == greedy(server, "lora1")  # as the adapter loaded by a model of its own
    assert style != plain  # the adapter decides
    assert greedy(server, "plain") == plain  # after the other's requests, still without it
    assert greedy(server, "style") == style


def test_one_load_shared_and_shown(server: ServerProcess) -> None:
    log = server.log().splitlines()
    assert not any("model style loaded from" in line for line in log)
    assert sum("model plain loaded from" in line for line in log) == 1
    line = next(x for x in log if "model style loaded: shares the weights and context of model plain" in x)
    assert "lora: style.gguf x1" in line and "2 slots" in line, line
    listing = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]}
    assert listing["style"]["shares_weights_with"] == "plain"
    assert "shares_weights_with" not in listing["plain"]
    assert listing["style"]["max_input_tokens"] == listing["plain"]["max_input_tokens"]


def test_concurrent_streams_answer_as_alone(server: ServerProcess) -> None:
    n = 24
    alone = {model: stream(server, model, n) for model in ("plain", "style")}
    assert alone["plain"] != alone["style"]
    before = status(server, "plain").get("lora_split_steps", 0)
    for _ in range(5):
        results: dict[str, list[str]] = {"plain": [], "style": []}
        errors: list[BaseException] = []

        def run(
            model: str, results: dict[str, list[str]] = results, errors: list[BaseException] = errors
        ) -> None:
            try:
                results[model].append(stream(server, model, n))
            except BaseException as exc:  # noqa: BLE001 - reported by the test
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(m,)) for m in ("plain", "style", "plain", "style")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert results == {model: [alone[model]] * 2 for model in ("plain", "style")}
        if status(server, "plain").get("lora_split_steps", 0) > before:
            break
    counts = status(server, "plain")
    assert counts["lora_split_steps"] > before, counts  # the two sets ran at once, in steps of their own
    assert counts["lora_switches"] > 0
    assert status(server, "style")["lora_split_steps"] == counts["lora_split_steps"]  # one engine


def test_a_second_turn_reuses_only_its_own_prefix(server: ServerProcess) -> None:
    first = [{"role": "user", "content": "Tell me about Lyon. " * 10}]
    plain = ask(server, "plain", first)
    style = ask(server, "style", first)  # the same prompt tokens, computed through the adapter
    assert style.usage.cache_read_input_tokens == 0, style.usage  # plain's prefix is not its own
    for model, answer in (("plain", plain), ("style", style)):
        second = [*first, {"role": "assistant", "content": text(answer)}, {"role": "user", "content": "And?"}]
        again = ask(server, model, second)
        read = again.usage.cache_read_input_tokens or 0
        assert read >= answer.usage.input_tokens - 1, (model, again.usage, answer.usage)
        reference = ask(server, "lora1" if model == "style" else "alone", second)
        assert text(again) == text(reference), model


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ({"style": shared("nothing")}, r"model 'style': settings.base = 'nothing': no model of that id"),
        (
            {"plain": "base", "tone": shared("plain"), "style": shared("tone")},
            r"model 'style': settings.base = 'tone': that model itself shares the load of 'plain'",
        ),
        (
            {"plain": {"driver": "echo"}, "style": shared("plain")},
            r"model 'style': settings.base = 'plain': that model runs on driver 'echo'",
        ),
        (
            {"plain": "base", "style": {**shared("plain", parallel=2, n_batch=64), "context_window": 256}},
            r"model 'style': settings.parallel, settings.n_batch, context_window need a load of their own",
        ),
        (
            {"plain": "base", "style": shared("plain", lora="foreign")},
            r"model 'style': settings.lora.0: llama.cpp refused the adapter .*qwen3-style.gguf: .*",
        ),
        (
            {"plain": "base", "style": shared("plain", lora="absent")},
            r"model 'style': settings.lora.0: adapter file not found: .*absent.gguf",
        ),
    ],
)
def test_a_misconfigured_shared_entry_stops_start_up(
    files: dict[str, Path], models: dict[str, Any], message: str
) -> None:
    paths = {"foreign": str(files["foreign"]), "absent": str(files["base"].with_name("absent.gguf"))}
    config: dict[str, Any] = {}
    for model_id, value in models.items():
        if value == "base":
            value = entry(files["base"])
        elif "lora" in value.get("settings", {}):
            value = {**value, "settings": {**value["settings"], "lora": paths[value["settings"]["lora"]]}}
        config[model_id] = value
    with pytest.raises(ConfigError, match=message):
        with in_process_app({"models": config}):
            pass
