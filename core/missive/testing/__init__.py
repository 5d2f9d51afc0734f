"""Test helpers for Missive and for plugin authors.

:func:`live_server` runs a real ``missive serve`` in a subprocess on a free
loopback port, so tests talk to it through real clients (the official
``anthropic`` SDK, httpx) exactly as users do::

    with live_server({"models": {"echo": {"driver": "echo"}}}) as url:
        client = anthropic.Anthropic(base_url=url, api_key="test")
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = [
    "free_port",
    "dump_toml",
    "live_server",
    "serve_process",
    "ServerProcess",
    "DriverContract",
    "generation_request",
    "collect_events",
    "text_of",
    "check_order",
    "THINKING_CHATML",
    "HARMONY_FEWSHOT",
    "start_http_server",
    "stop_http_server",
    "stop_process",
    "open_fds",
    "rss_mib",
    "tcp_states",
    "wait_until",
    "until",
    "watch_async_generators",
    "finalized_generators",
    "GENERATOR_ERRORS",
]


#: A ChatML chat template with a reasoning format, built the way Qwen3's is:
#: ``enable_thinking`` opens ``<think>`` in the prompt, otherwise an empty
#: closed block is rendered; past reasoning is rendered from
#: ``reasoning_content``. It makes any ChatML model (the embedded SmolLM2) a
#: "reasoning model" for tests of thinking (``settings.chat_template``).
THINKING_CHATML = (
    "{% for message in messages %}"
    "{% if message.role == 'assistant' and message.reasoning_content %}"
    "<|im_start|>assistant\n<think>\n{{ message.reasoning_content }}\n</think>\n\n{{ message.content }}<|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking %}<think>\n{% else %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)


#: A harmony (gpt-oss) chat template for tests on a model that knows nothing
#: of harmony (the embedded SmolLM2): a fixed few-shot preamble shows three
#: turns of ``analysis`` reasoning followed by a call to ``get_time`` (its
#: recipient in the role part of the header, one of the two forms harmony
#: allows), so with greedy sampling the model copies the pattern: reasoning,
#: then a call. Messages are rendered as ``<|start|>{role}<|message|>...<|end|>``;
#: an assistant message whose content starts with ``<|channel|>`` is written
#: as is (a prefill in harmony markup), other assistant text as a ``final``
#: message. It renders ``tools`` and ``tool_calls`` itself (no Hermes tool
#: prompt is added) and contains ``<|channel|>``, so the harmony tool and
#: reasoning parsers are chosen for it (``settings.chat_template``).
HARMONY_FEWSHOT = (
    "{% set turn = '<|start|>user<|message|>What time is it?<|end|>"
    "<|start|>assistant<|channel|>analysis<|message|>The user wants the time. Call get_time.<|end|>"
    "<|start|>assistant to=functions.get_time<|channel|>commentary <|constrain|>json<|message|>{}<|call|>' %}"
    "{% if tools %}<|start|>developer<|message|>Tools:{% for tool in tools %} {{ tool.function.name }}{% endfor %}<|end|>"
    "{% endif %}"
    "{{ turn }}{{ turn }}{{ turn }}"
    "{% for message in messages %}{% set content = message.content or '' %}"
    "{% if message.role == 'assistant' and content.startswith('<|channel|>') %}"
    "<|start|>assistant{{ content }}<|end|>"
    "{% elif message.role == 'assistant' %}"
    "{% if content %}<|start|>assistant<|channel|>final<|message|>{{ content }}<|end|>{% endif %}"
    "{% for call in message.tool_calls or [] %}<|start|>assistant to=functions.{{ call.function.name }}"
    "<|channel|>commentary <|constrain|>json<|message|>{{ call.function.arguments }}<|call|>{% endfor %}"
    "{% else %}<|start|>{{ message.role }}<|message|>{{ content }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}"
)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def dump_toml(data: Mapping[str, Any]) -> str:
    """Write a config mapping as TOML (tables of tables; values as inline TOML)."""
    lines: list[str] = []

    def table(prefix: list[str], mapping: Mapping[str, Any]) -> None:
        scalars = {k: v for k, v in mapping.items() if not isinstance(v, Mapping)}
        tables = {k: v for k, v in mapping.items() if isinstance(v, Mapping)}
        if prefix and (scalars or not tables):
            lines.append("[" + ".".join(json.dumps(p) for p in prefix) + "]")
        for key, value in scalars.items():
            lines.append(f"{json.dumps(key)} = {_toml_value(value)}")
        for key, value in tables.items():
            table([*prefix, key], value)

    table([], data)
    return "\n".join(lines) + "\n"


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"missive serve exited with {proc.returncode}:\n{log_path.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"missive serve not healthy after {timeout}s:\n{log_path.read_text()}")


@dataclass
class ServerProcess:
    """A ``missive serve`` started by :func:`serve_process`.

    Attributes:
        url: its base URL (``http://127.0.0.1:PORT``).
        process: the child process (``process.returncode`` once it ended).
        log_path: the file its stdout and stderr go to.
    """

    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        """Everything it has logged so far."""
        return self.log_path.read_text(errors="replace")

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self.url.rsplit(":", 1)[1])


_STATE_HOME: Path | None = None


def tests_state_home() -> Path:
    """An ``XDG_STATE_HOME`` for the servers this process starts: one folder
    per process, made on first use and removed at its exit."""
    global _STATE_HOME
    if _STATE_HOME is None:
        import atexit
        import shutil

        _STATE_HOME = Path(tempfile.mkdtemp(prefix="missive-test-state-"))
        atexit.register(shutil.rmtree, _STATE_HOME, True)
    return _STATE_HOME


@contextlib.contextmanager
def serve_process(
    config: Mapping[str, Any] | None = None,
    *,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    python: str | Path | None = None,
) -> Iterator[ServerProcess]:
    """Run ``missive serve`` with ``config`` (None: no config file, the
    defaults) and yield it once ``/health`` answers, as a
    :class:`ServerProcess` (URL, process, log). ``MISSIVE*`` variables of this
    process are not passed on, ``XDG_CONFIG_HOME`` is an empty folder (no
    user configuration file is read), and ``XDG_STATE_HOME`` a folder of this
    test process (:func:`tests_state_home`: the servers of one test run share
    their state, the thinking key and the llama.cpp trial records, but not
    the user's own ``~/.local/state/missive``); ``env`` adds or replaces
    variables (``MISSIVE_STATE_DIR`` for a state of the test's own).
    ``python``: the interpreter that runs it (default: this one), e.g. that
    of a virtual environment a distribution was installed into. The server's log is in
    the error if it fails to start; it is stopped on exit (:func:`stop_process`).
    """
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="missive-test-") as tmp:
        cmd = [str(python or sys.executable), "-m", "missive", "serve", "--port", str(port), *args]
        if config is not None:
            config_path = Path(tmp) / "missive.toml"
            config_path.write_text(dump_toml(config))
            cmd += ["--config", str(config_path)]
        log_path = Path(tmp) / "server.log"
        full_env = {k: v for k, v in os.environ.items() if not k.startswith("MISSIVE")}
        # No user configuration file (~/.config/missive/missive.toml) reaches a
        # test, nor the user's state folder.
        full_env["XDG_CONFIG_HOME"] = tmp
        full_env["XDG_STATE_HOME"] = str(tests_state_home())
        full_env.update(env or {})
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env)
        url = f"http://127.0.0.1:{port}"
        try:
            _wait_healthy(url, proc, timeout, log_path)
            yield ServerProcess(url, proc, log_path)
        finally:
            stop_process(proc, log_path)


@contextlib.contextmanager
def live_server(
    config: Mapping[str, Any] | None = None,
    *,
    args: tuple[str, ...] = (),
    env: Mapping[str, str] | None = None,
    timeout: float = 120.0,
    python: str | Path | None = None,
) -> Iterator[str]:
    """Run ``missive serve`` with ``config`` (None: no config file, the defaults).

    Yields the base URL (``http://127.0.0.1:PORT``). The server's log is
    printed if it fails to start; it is stopped (SIGTERM, then SIGKILL) on exit.
    :func:`serve_process` gives the process and its log too; ``python`` is
    the interpreter to run it with (default: this one).
    """
    with serve_process(config, args=args, env=env, timeout=timeout, python=python) as server:
        yield server.url


def stop_process(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Stop a server started by a test: SIGTERM; after 5 s a second SIGTERM
    (``missive serve`` then ends the shutdown grace at once: answers still
    running get their ``error`` event, docs/deployment.md); SIGKILL 10 s
    later. Its log is written to stderr when ``MISSIVE_TEST_SHOW_LOGS`` is set."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if os.environ.get("MISSIVE_TEST_SHOW_LOGS"):
        sys.stderr.write(log_path.read_text(errors="replace"))


#: ``/proc/net/tcp`` state codes (Linux ``include/net/tcp_states.h``).
_TCP_STATES = {
    "01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
    "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN", "0B": "CLOSING",
}


def open_fds(pid: int) -> int:
    """File descriptors process ``pid`` has open (Linux: ``/proc/PID/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid``, MiB (Linux: ``VmRSS``)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def tcp_states(pid: int) -> dict[str, int]:
    """The TCP sockets process ``pid`` holds, counted by state
    (``ESTABLISHED``, ``CLOSE_WAIT``, ``LISTEN``...; Linux: ``/proc/net/tcp``
    and ``tcp6`` matched to the process's descriptors by inode). A socket in
    ``CLOSE_WAIT`` was closed by its peer and not yet by the process."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    counts: dict[str, int] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)  # the header
                for line in lines:
                    fields = line.split()
                    if fields[9] in inodes:
                        state = _TCP_STATES.get(fields[3], fields[3])
                        counts[state] = counts.get(state, 0) + 1
        except FileNotFoundError:
            continue
    return counts


def until(condition: Any, what: str, timeout: float = 30.0, interval: float = 0.02) -> Any:
    """Poll ``condition()`` until it returns something true, and return that.

    Raises:
        AssertionError: ``never {what}`` when ``timeout`` seconds pass first.
    """
    end = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > end:
            raise AssertionError(f"never {what}")
        time.sleep(interval)
    return result


def wait_until(condition: Any, timeout: float, interval: float = 0.1) -> bool:
    """Poll ``condition()`` until it is true or ``timeout`` seconds pass;
    return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(interval)
    return bool(condition())


_WATCH = """\
# Written by missive.testing.watch_async_generators: log every async generator
# that the garbage collector finalizes (instead of the task that ran it).
import asyncio.base_events as _base_events
import sys as _sys

_hook = _base_events.BaseEventLoop._asyncgen_finalizer_hook


def _finalizer(self, agen):
    frame = agen.ag_frame
    where = f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else "?"
    _sys.stderr.write(f"{FINALIZED_MARK}{agen.__qualname__} at {where}\\n")
    _sys.stderr.flush()
    return _hook(self, agen)


_base_events.BaseEventLoop._asyncgen_finalizer_hook = _finalizer
"""

#: Start of the line a watched server writes for each async generator the
#: garbage collector finalized (:func:`watch_async_generators`).
FINALIZED_MARK = "async generator finalized by the garbage collector: "

#: What the server log shows when an async generator was closed from another
#: task than the one running it, or not closed by its task at all.
GENERATOR_ERRORS = (
    "Task exception was never retrieved",
    "asynchronous generator is already running",
    "didn't stop after athrow",
    "async generator ignored GeneratorExit",
)


def watch_async_generators(directory: str | Path) -> dict[str, str]:
    """Environment variables that make a server started with them (``env=``
    of :func:`serve_process`) log a line for every async generator the
    garbage collector finalizes, as asyncio does then: in a new task, not in
    the task that ran it (the generator was left suspended, not closed).
    Read them back with :func:`finalized_generators`. A ``sitecustomize``
    module written to ``directory`` does it (asyncio's finalizer hook,
    wrapped); ``directory`` goes first on ``PYTHONPATH``.
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "sitecustomize.py").write_text(_WATCH.replace("FINALIZED_MARK", repr(FINALIZED_MARK)))
    path = [str(directory), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(path)}


def finalized_generators(log: str, under: tuple[str | Path, ...] = ()) -> list[str]:
    """The async generators a :func:`watch_async_generators` server's log
    says the garbage collector finalized (``qualname at file:line``), only
    those whose code lies under one of the ``under`` directories if given
    (e.g. Missive's and the plugins', leaving out libraries' internal
    generators, which are theirs to close)."""
    roots = [str(Path(root).resolve()) + os.sep for root in under]
    found = []
    for line in log.splitlines():
        if FINALIZED_MARK not in line:
            continue
        entry = line.split(FINALIZED_MARK, 1)[1]
        where = entry.rsplit(" at ", 1)[-1]
        if not roots or any(where.startswith(root) for root in roots):
            found.append(entry)
    return found


def start_http_server(
    handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", port: int = 0
) -> tuple[ThreadingHTTPServer, str]:
    """Serve ``handler`` on ``host`` and ``port`` (0: a free port) from a
    daemon thread, for fake backends in tests. Returns the server and its
    base URL (``http://HOST:PORT``); stop it with :func:`stop_http_server`."""
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server, f"http://{host}:{server.server_address[1]}"


def stop_http_server(server: ThreadingHTTPServer | None) -> None:
    """Stop a server from :func:`start_http_server` (None: nothing to do)."""
    if server is not None:
        server.shutdown()
        server.server_close()


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

    def client(self, url: str) -> Any:
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
        assert counted == usage.input_tokens + usage.cache_read_input_tokens + usage.cache_creation_input_tokens

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


# -- helpers for driver unit tests (no HTTP) -----------------------------------


def generation_request(
    messages: list[dict[str, Any]], *, model: str = "test-model", max_tokens: int = 16, driver: Any = None,
    **fields: Any,
) -> Any:
    """A :class:`~missive.driver.interface.GenerationRequest` built by the
    core's own builder (:func:`missive.messages.prepare.build_generation`:
    offered tools, tool_choice, the checks, the conversation, the thinking
    plan, the output cap), for calling a driver directly.

    ``fields`` are more Messages API body fields (``system``, ``tools``,
    ``temperature``...). ``driver``: the driver the request is for: its
    capabilities are checked (a ``CapabilityError`` as the server would
    answer 400) and its model's ``max_output_tokens`` caps ``max_tokens``;
    without one, a driver that can do everything is assumed. Image and
    document blocks are left as they are (the server's media pipeline would
    convert them). Raises pydantic's ValidationError on a bad body.
    """
    import secrets

    from ..messages.prepare import Notes, Target, build_generation
    from ..protocol.schema.request import MessagesRequest
    from ..thinking.signing import Signer

    body = MessagesRequest.model_validate({"model": model, "max_tokens": max_tokens, "messages": messages, **fields})
    if driver is None:
        target = Target(model, "test", _capable())
    else:
        target = Target(model, driver.name, driver.capabilities, driver.entry.max_output_tokens)
    return build_generation(
        body, target, request_id="req_test", signer=Signer(secrets.token_bytes(32)), notes=Notes()
    )


def _capable() -> Any:
    """The capabilities of a driver that takes every request."""
    from ..driver.capabilities import Capabilities, ToolChoiceMode

    modes: frozenset[ToolChoiceMode] = frozenset({"auto", "any", "tool", "none"})
    return Capabilities(
        tool_choice=modes, strict_tools=modes, parallel_tool_calls=True, thinking=True, structured_output=True,
        input_media=frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"}),
    )


async def collect_events(events: Any, timeout: float = 600) -> list[Any]:
    """All events of a driver's ``generate`` (``timeout``: a hang guard, seconds)."""
    import anyio

    with anyio.fail_after(timeout):
        return [event async for event in events]


def text_of(events: list[Any]) -> str:
    """The text of the :class:`~missive.driver.events.TextDelta` events, joined."""
    from ..driver.events import TextDelta

    return "".join(e.text for e in events if isinstance(e, TextDelta))


def check_order(events: list[Any]) -> tuple[Any, Any]:
    """Assert a text-only answer's event order (``Started``, deltas, ``Finished``);
    return the first and the last event."""
    from ..driver.events import Finished, Started, TextDelta

    assert isinstance(events[0], Started), events
    assert isinstance(events[-1], Finished), events
    assert all(isinstance(e, TextDelta) for e in events[1:-1]), events
    return events[0], events[-1]
