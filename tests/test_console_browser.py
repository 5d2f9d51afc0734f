"""The web console (core/missive/console/) in a real browser: headless
Chromium driven by Selenium against a live server serving the embedded
SmolLM2 (real slots and prompt cache) and the echo driver (scripted streams).

Skipped, with the reason, where Chromium, chromedriver or Selenium is absent
(``scripts/setup --test`` installs them where it can). With
``MISSIVE_TEST_SCREENSHOTS=DIR`` the screenshots test writes the pictures
of docs/operations.md there (``docs/images``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from browser import LOAD_FIGURES_JS, browser, choose, click, errors, missing, rows, text_of, wait_for

if missing():
    pytest.skip(missing() or "", allow_module_level=True)

from selenium.webdriver.common.by import By  # noqa: E402  (after the skip: selenium may be absent)

from missive.testing import ServerProcess, serve_process  # noqa: E402
from missive_echo import script  # noqa: E402
from missive_llamacpp.plugin import default_model_path  # noqa: E402

KEY = "sk-console-browser-5Rk2"  # an admin key: the console needs one
SMOL = "smollm2-135m"
ECHO = "echo"
TOOLS = [
    {
        "name": "get_weather",
        "description": "The weather of a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    config: dict[str, Any] = {
        "server": {"capture_dir": str(tmp_path_factory.mktemp("capture"))},
        "keys": {"ops": {"key_sha256": hashlib.sha256(KEY.encode()).hexdigest(), "scope": "admin"}},
        "models": {
            SMOL: {
                "driver": "llamacpp",
                "context_window": 1024,
                "settings": {"model_path": str(default_model_path()), "parallel": 2},
            },
            ECHO: {
                "driver": "echo",
                "context_window": 4000,
                "settings": {
                    "capabilities": {"tool_choice": ["auto", "any", "tool", "none"], "thinking": True}
                },
            },
        },
    }
    state = tmp_path_factory.mktemp("state")
    with serve_process(config, env={"MISSIVE_STATE_DIR": str(state)}, timeout=300) as proc:
        yield proc


@pytest.fixture(scope="module")
def client(server: ServerProcess) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def downloads(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("downloads")


@pytest.fixture(scope="module")
def driver(downloads: Path) -> Iterator[Any]:
    with browser(downloads) as found:
        yield found


def open_console(driver: Any, server: ServerProcess, view: str) -> None:
    """Load the console on ``view``, entering the key when it asks for one."""
    driver.get(f"{server.url}/console#{view}")
    wait_for(
        driver,
        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "true",
        "the page",
    )
    if driver.find_element(By.ID, "key-dialog").get_attribute("open") is not None:
        field = driver.find_element(By.ID, "key-input")
        field.clear()
        field.send_keys(KEY)
        driver.find_element(By.ID, "key-save").click()


def css(driver: Any, selector: str) -> list[Any]:
    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def set_value(driver: Any, element_id: str, value: str) -> None:
    field = driver.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def test_page_loads_asks_for_the_key_and_shows_every_model_without_console_errors(
    server: ServerProcess, driver: Any
) -> None:
    """A first visit: ``/console`` redirects to the page, which asks for the
    key before calling anything (no 401 in the console), then shows both
    models loaded; the browser logs no error at all."""
    driver.get(f"{server.url}/console")
    wait_for(
        driver,
        lambda d: d.find_element(By.ID, "key-dialog").get_attribute("open") is not None,
        "the key dialog",
    )
    assert driver.current_url == f"{server.url}/console/"
    set_value(driver, "key-input", KEY)
    driver.find_element(By.ID, "key-save").click()
    for model in (SMOL, ECHO):
        wait_for(
            driver,
            lambda d, m=model: text_of(d, f'.card[data-model="{m}"] .badge') == "loaded",
            f"{model} loaded",
        )
    assert "llamacpp" in text_of(driver, f'.card[data-model="{SMOL}"]')
    assert errors(driver) == []
    figures = driver.execute_script(LOAD_FIGURES_JS)
    print("console first load:", json.dumps(figures))
    assert figures["files"] >= 8 and figures["transfer_bytes"] >= figures["decoded_bytes"] > 0


def test_now_shows_what_each_slot_holds(
    server: ServerProcess, driver: Any, client: anthropic.Anthropic
) -> None:
    """After a request of a Claude Code session, the model's slot table shows
    a slot holding that session's tokens (its first 8 characters), idle."""
    session = "c0ffee42-console-test"
    client.messages.create(
        model=SMOL,
        max_tokens=4,
        messages=[{"role": "user", "content": "Hi"}],
        extra_body={"temperature": 0},
        extra_headers={"x-claude-code-session-id": session},
    )
    open_console(driver, server, "now")
    row = f'.card[data-model="{SMOL}"] table.slots tbody tr'

    def holding(d: Any) -> list[str] | None:
        for cells in rows(d, row):
            if cells[2] == session[:8] and cells[1] == "idle" and int(cells[3].replace(",", "") or 0) > 0:
                return cells
        return None

    cells = wait_for(driver, holding, "a slot holding the session's tokens")
    assert len(rows(driver, row)) == 2 and cells[0] in ("0", "1")
    assert errors(driver) == []


def test_requests_view_shows_a_request_just_made(
    server: ServerProcess, driver: Any, client: anthropic.Anthropic
) -> None:
    """A request made through the SDK appears in the list with its model,
    status, tokens and stop reason; its detail shows the ``missive-ignored``
    items and, capture being on and the key the same, the captured body."""
    raw = client.messages.with_raw_response.create(
        model=ECHO,
        max_tokens=20,
        messages=[{"role": "user", "content": "Quixotic7 pears"}],
        extra_body={"console_probe": 1},
        extra_headers={"anthropic-beta": "console-beta-2099"},
    )
    rid = raw.headers["request-id"]
    open_console(driver, server, "requests")
    row = f'tr[data-request-id="{rid}"]'
    wait_for(driver, lambda d: rows(d, row), "the request's row")
    cells = rows(driver, row)[0]
    assert cells[2:5] == ["POST /v1/messages", ECHO, "200"] and cells[10] == "end_turn" and cells[12] == "2"
    click(driver, row, "the request's row")
    wait_for(
        driver, lambda d: "console_probe" in text_of(d, "#rq-detail ul.ignored"), "the detail's ignored list"
    )
    assert "anthropic-beta=console-beta-2099" in text_of(driver, "#rq-detail ul.ignored")
    wait_for(driver, lambda d: "Quixotic7" in text_of(d, "#rq-detail pre.capture"), "the captured body")
    choose(driver, "rq-status", "4xx")
    wait_for(driver, lambda d: not rows(d, row), "the filter hiding the 200")
    assert errors(driver) == []


def playground(
    driver: Any,
    server: ServerProcess,
    message: str,
    *,
    tools: str = "",
    thinking: str = "",
    max_tokens: int = 200,
) -> None:
    """Fill the playground's form for the echo model and send it."""
    open_console(driver, server, "playground")
    choose(driver, "pg-model", ECHO)
    set_value(driver, "pg-max-tokens", str(max_tokens))
    driver.execute_script("document.querySelector('#pg-messages textarea').value = arguments[0]", message)
    driver.execute_script("document.getElementById('pg-tools').value = arguments[0]", tools)
    choose(driver, "pg-thinking", thinking)
    driver.find_element(By.ID, "pg-send").click()


def answer_state(driver: Any) -> str:
    return str(driver.find_element(By.ID, "pg-answer").get_attribute("data-state"))


def test_playground_streams_the_answer_token_by_token(
    server: ServerProcess, driver: Any, tmp_path: Path
) -> None:
    """The answer's first token shows while the stream is held open by the
    server (the echo script waits for a file), the rest once it goes on."""
    go = tmp_path / "go"
    playground(
        driver, server, script({"text": "Hello"}, {"wait_file": str(go)}, {"text": " world"}, {"text": "!"})
    )
    wait_for(driver, lambda d: text_of(d, "#pg-answer .block.text .body") == "Hello", "the first token")
    assert answer_state(driver) == "streaming"
    go.touch()
    wait_for(driver, lambda d: answer_state(d) == "done", "the end of the stream")
    assert text_of(driver, "#pg-answer .block.text .body") == "Hello world!"
    assert "stop_reason end_turn" in text_of(driver, "#pg-usage") and "output 3 tokens" in text_of(
        driver, "#pg-usage"
    )
    assert errors(driver) == []


def test_playground_renders_thinking_and_a_tool_call_and_writes_its_code(
    server: ServerProcess, driver: Any
) -> None:
    """Thinking and a tool call (its input streamed in fragments) render as
    blocks; the curl and Python code hold the same request, the curl body
    as JSON and the Python as valid code."""
    message = script(
        {"thinking": "The user wants weather."},
        {"tool_call": {"name": "get_weather", "arguments": ['{"ci', 'ty": "Par', 'is"}']}},
        stop_reason="tool_use",
    )
    playground(driver, server, message, tools=json.dumps(TOOLS), thinking="enabled", max_tokens=2048)
    wait_for(driver, lambda d: answer_state(d) == "done", "the end of the stream")
    assert text_of(driver, "#pg-answer .block.thinking .body") == "The user wants weather."
    call = '#pg-answer .block.tool_use[data-name="get_weather"]'
    assert json.loads(text_of(driver, f"{call} .body")) == {"city": "Paris"}
    assert "tool call: get_weather (toolu_" in text_of(driver, f"{call} .label")
    assert "stop_reason tool_use" in text_of(driver, "#pg-usage")
    curl = driver.find_element(By.ID, "pg-code").get_attribute("textContent")
    body = json.loads(re.search(r"<<'JSON'\n(.*)\nJSON$", curl, re.S).group(1))  # type: ignore[union-attr]
    assert body["tools"] == TOOLS and body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert body["model"] == ECHO and body["stream"] is True and body["messages"][0]["content"] == message
    driver.find_element(By.CSS_SELECTOR, '.code-tabs button[data-code="python"]').click()
    code = driver.find_element(By.ID, "pg-code").get_attribute("textContent")
    compile(code, "playground.py", "exec")
    assert "client.messages.stream(" in code and '"get_weather"' in code and "thinking={" in code
    # Continuing: the answer's blocks (signed thinking, the call) become an
    # assistant message and a tool_result for the call is offered; sent with
    # a result filled in, the server takes the whole conversation.
    click(driver, "#pg-status button", "Continue the conversation")
    texts = driver.execute_script(
        "return [...document.querySelectorAll('#pg-messages textarea')].map((t) => t.value)"
    )
    assert len(texts) == 3
    blocks, results = json.loads(texts[1]), json.loads(texts[2])
    assert [b["type"] for b in blocks] == ["thinking", "tool_use"] and blocks[0]["signature"]
    assert results == [{"type": "tool_result", "tool_use_id": blocks[1]["id"], "content": ""}]
    results[0]["content"] = "18 C and sunny"
    driver.execute_script(
        "document.querySelectorAll('#pg-messages textarea')[2].value = arguments[0]", json.dumps(results)
    )
    driver.find_element(By.ID, "pg-send").click()
    wait_for(driver, lambda d: answer_state(d) == "done", "the answer to the tool result")
    assert "stop_reason end_turn" in text_of(driver, "#pg-usage")
    assert errors(driver) == []


def test_invalid_tools_json_shows_the_api_error_and_the_page_keeps_working(
    server: ServerProcess, driver: Any
) -> None:
    """Tools that are not JSON go to the server as typed; the page shows its
    400 ``invalid_request_error`` message, then answers once they are fixed."""
    playground(driver, server, "still alive", tools='[{"name": "broken",')
    wait_for(driver, lambda d: answer_state(d) == "error", "the error")
    shown = text_of(driver, "#pg-answer .error-box")
    assert shown.startswith("400 invalid_request_error: request body is not valid JSON"), shown
    assert "(request-id req_" in shown and "tools is not valid JSON" in text_of(driver, "#pg-answer")
    driver.execute_script("document.getElementById('pg-tools').value = arguments[0]", json.dumps(TOOLS))
    driver.find_element(By.ID, "pg-send").click()
    wait_for(driver, lambda d: answer_state(d) == "done", "the answer after the fix")
    assert text_of(driver, "#pg-answer .block.text .body") == "still alive"
    # The browser logs the 400 itself (a failed load), and nothing else.
    logged = [e["message"] for e in errors(driver)]
    assert (
        len(logged) == 1
        and "/v1/messages - Failed to load resource: the server responded with a status of 400" in logged[0]
    )


def test_graphs_draw_the_last_hour(server: ServerProcess, driver: Any, client: anthropic.Anthropic) -> None:
    """Each chart draws its series from the server's counters; one model's
    graphs can be chosen."""
    client.messages.create(model=ECHO, max_tokens=5, messages=[{"role": "user", "content": "graph me"}])
    open_console(driver, server, "graphs")
    for chart in ("requests", "tokens", "cache", "ttft", "queue"):
        wait_for(driver, lambda d, c=chart: css(d, f'[data-chart="{c}"] svg polyline'), f"the {chart} chart")
    choose(driver, "gr-model", ECHO)
    wait_for(driver, lambda d: "requests" in text_of(d, '[data-chart="requests"] .readout'), "the readout")
    assert errors(driver) == []


def test_batches_list_progress_and_results_download(
    server: ServerProcess, driver: Any, client: anthropic.Anthropic, downloads: Path
) -> None:
    """A batch made through the SDK is listed with its progress; once ended,
    its results download as JSON Lines, one line per request."""
    batch = client.messages.batches.create(
        requests=[
            {
                "custom_id": f"q{i}",
                "params": {
                    "model": ECHO,
                    "max_tokens": 10,
                    "messages": [{"role": "user", "content": f"batch answer {i}"}],
                },
            }
            for i in range(3)
        ]
    )
    open_console(driver, server, "batches")
    row = f'tr[data-batch-id="{batch.id}"]'
    wait_for(driver, lambda d: css(d, f'{row}[data-status="ended"]'), "the batch to end")
    assert "3 / 3" in text_of(driver, row)
    click(driver, f"{row} button.download", "the results button")
    target = downloads / f"{batch.id}-results.jsonl"
    wait_for(driver, lambda d: target.exists() and target.stat().st_size > 0, "the results file")
    results = [json.loads(line) for line in target.read_text().splitlines()]
    assert sorted(r["custom_id"] for r in results) == ["q0", "q1", "q2"]
    assert {r["result"]["type"] for r in results} == {"succeeded"}
    assert errors(driver) == []


def test_screenshots_for_the_docs(
    server: ServerProcess, driver: Any, client: anthropic.Anthropic, tmp_path: Path
) -> None:
    """A picture of each view, after some traffic (into
    ``$MISSIVE_TEST_SCREENSHOTS`` when set: docs/images)."""
    from PIL import Image

    target = Path(os.environ.get("MISSIVE_TEST_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    for text in ("What is the capital of France?", "Name a colour."):
        client.messages.create(
            model=SMOL,
            max_tokens=12,
            messages=[{"role": "user", "content": text}],
            extra_body={"temperature": 0},
        )
    message = script(
        {"text": "Let me check the weather. "},
        {"tool_call": {"name": "get_weather", "arguments": ['{"city": "Paris"}']}},
        stop_reason="tool_use",
    )
    playground(driver, server, message, tools=json.dumps(TOOLS))
    wait_for(driver, lambda d: answer_state(d) == "done", "the playground's answer")
    shots = {"playground": None}
    driver.save_screenshot(str(target / "console-playground.png"))
    for view, ready in (
        ("now", f'.card[data-model="{SMOL}"] table.slots'),
        ("requests", "#rq-table tbody tr"),
        ("graphs", '#charts[data-window="300"] [data-chart="tokens"] polyline'),
    ):
        open_console(driver, server, view)
        if view == "graphs":
            choose(driver, "gr-window", "300")
        wait_for(driver, lambda d, s=ready: css(d, s), f"the {view} view")
        if view == "requests":
            click(driver, "#rq-table tbody tr", "a request")
            wait_for(driver, lambda d: css(d, "#rq-detail dl"), "a request's detail")
        driver.save_screenshot(str(target / f"console-{view}.png"))
        shots[view] = None
    for view in shots:
        path = target / f"console-{view}.png"
        with Image.open(path) as image:
            assert image.format == "PNG" and image.size[0] >= 800
            # Small files for the docs: 64 colours are plenty for a UI.
            image.convert("RGB").quantize(64).save(path, optimize=True)
    assert errors(driver) == []
