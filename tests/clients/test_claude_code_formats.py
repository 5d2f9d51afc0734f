"""Claude Code runs tools that a model wrote in its family's own syntax.

An echo model per format hands raw model text (Qwen3-Coder XML, GLM's
``<arg_key>`` pairs, MiniMax-M2's ``<invoke>``, DeepSeek-V4's DSML, Kimi-K3's
XTML), streamed in pieces cut
inside tags and values, to the tool parser its ``tool_parser`` setting
names: the core's parsing path runs as it does for an in-process model.
Claude Code must get ``tool_use`` blocks, run the tool, and send the result
back; the arguments it runs with prove the values were typed from its
schemas (Bash's ``timeout`` is a number, Claude Code refuses a string).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

#: Test tier (docs/contributing.md): a real model through model_missive (imported where it is used,
#: so not read)
pytestmark = pytest.mark.model

if TYPE_CHECKING:
    from tests.clients.conftest import ClaudeCode, Missive

FORMATS = ("qwen3_xml", "glm45", "minimax_m2", "deepseek_v4", "kimi_k3")


def _dsml(name: str, params: dict[str, tuple[str, bool]]) -> str:
    """DeepSeek-V4's block (its encoder's layout): ``string`` says whether a value is text."""
    body = "".join(
        f'<｜DSML｜parameter name="{k}" string="{"true" if s else "false"}">{v}</｜DSML｜parameter>\n'
        for k, (v, s) in params.items()
    )
    return (
        f'\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name="{name}">\n{body}'
        "</｜DSML｜invoke>\n</｜DSML｜tool_calls>"
    )


def _xtml(name: str, params: dict[str, tuple[str, str]]) -> str:
    """Kimi-K3's tools element (its template's render_assistant)."""
    body = "".join(
        f'<|open|>argument key="{k}" type="{t}"<|sep|>{v}<|close|>argument<|sep|>'
        for k, (v, t) in params.items()
    )
    return (
        f'<|open|>tools<|sep|><|open|>call tool="{name}" index="1"<|sep|>{body}'
        "<|close|>call<|sep|><|close|>tools<|sep|>"
    )


@pytest.fixture
def missive(tmp_path: Path) -> Iterator[Missive]:
    from tests.clients.conftest import TOOL_CHOICES, model_missive

    script = tmp_path / "unused.json"  # model_missive's script file
    script.write_text("[]")
    settings = {"script_file": str(script), "capabilities": TOOL_CHOICES}
    models = {
        f"echo-{name}": {
            "driver": "echo",
            "context_window": 200_000,
            "settings": {**settings, "tool_parser": name},
        }
        for name in FORMATS
    }
    with model_missive(tmp_path, models) as server:
        yield server


@pytest.fixture
def claude(claude_bin: Path, missive: Missive, tmp_path: Path) -> ClaudeCode:
    from tests.clients.conftest import claude_code_for

    return claude_code_for(claude_bin, missive, tmp_path)


def pieces(text: str, size: int = 5) -> list[dict[str, str]]:
    """``text`` as echo text steps of ``size`` characters (tags cut anywhere)."""
    return [{"text": text[i : i + size]} for i in range(0, len(text), size)]


def write_call(fmt: str, path: str, content: str) -> str:
    if fmt == "qwen3_xml":
        return (
            f"<tool_call>\n<function=Write>\n<parameter=file_path>\n{path}\n</parameter>\n"
            f"<parameter=content>\n{content}\n</parameter>\n</function>\n</tool_call>"
        )
    if fmt == "glm45":
        return (
            f"<tool_call>Write\n<arg_key>file_path</arg_key>\n<arg_value>{path}</arg_value>\n"
            f"<arg_key>content</arg_key>\n<arg_value>{content}</arg_value>\n</tool_call>"
        )
    if fmt == "deepseek_v4":
        return _dsml("Write", {"file_path": (path, True), "content": (content, True)})
    if fmt == "kimi_k3":
        return _xtml("Write", {"file_path": (path, "string"), "content": (content, "string")})
    return (
        f'<minimax:tool_call>\n<invoke name="Write">\n<parameter name="file_path">{path}</parameter>\n'
        f'<parameter name="content">{content}</parameter>\n</invoke>\n</minimax:tool_call>'
    )


def bash_call(fmt: str, command: str, timeout: int) -> str:
    if fmt == "qwen3_xml":
        return (
            f"<tool_call>\n<function=Bash>\n<parameter=command>\n{command}\n</parameter>\n"
            f"<parameter=timeout>\n{timeout}\n</parameter>\n</function>\n</tool_call>"
        )
    if fmt == "glm45":
        return (
            f"<tool_call>Bash<arg_key>command</arg_key><arg_value>{command}</arg_value>"
            f"<arg_key>timeout</arg_key><arg_value>{timeout}</arg_value></tool_call>"
        )
    if fmt == "deepseek_v4":
        return _dsml("Bash", {"command": (command, True), "timeout": (str(timeout), False)})
    if fmt == "kimi_k3":
        return _xtml("Bash", {"command": (command, "string"), "timeout": (str(timeout), "number")})
    return (
        f'<minimax:tool_call>\n<invoke name="Bash">\n<parameter name="command">{command}</parameter>\n'
        f'<parameter name="timeout">{timeout}</parameter>\n</invoke>\n</minimax:tool_call>'
    )


@pytest.mark.parametrize("fmt", FORMATS)
def test_claude_code_runs_a_call_written_in_the_family_syntax(
    fmt: str, missive: Missive, claude: ClaudeCode
) -> None:
    target = claude.work / "src" / "app.py"
    # Code that quotes the formats' own closing tags: text inside a value.
    content = 'if a < b:\n    print("x, y </parameter> </function> </arg_value>")\n'
    missive.script(
        {"script": [{"text": "Writing it.\n"}, *pieces(write_call(fmt, str(target), content))]},
        {"match": "done-42", "script": [{"text": "All done: done-42."}]},
        {"script": [*pieces(bash_call(fmt, "echo done-$((6*7))", 60000), 7)]},
    )
    run = claude("write the app, then run the check", model=f"echo-{fmt}")
    assert run.returncode == 0, run.stderr
    result = run.json()
    assert result["is_error"] is False and result["result"] == "All done: done-42.", run.stdout
    assert target.read_text() == content

    first, second, third = missive.captures()
    call = next(
        b
        for m in second["body"]["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use"
    )
    assert call["name"] == "Write" and call["input"] == {"file_path": str(target), "content": content}
    bash = next(
        b
        for m in third["body"]["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b["type"] == "tool_use" and b["name"] == "Bash"
    )
    assert bash["input"] == {"command": "echo done-$((6*7))", "timeout": 60000}
