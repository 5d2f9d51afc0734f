"""The prompt cache's disk tier on the embedded default model, through the SDK.

A long prompt is answered, the server stops (its slot's state is written to
the state directory) and starts again on the same state directory: the slot
gets its state back at load, the same prompt is read from it, and answers as
the first server did. A state that was not in a slot when the server stopped
is read from the disk tier by the request that needs it. A state file
damaged in between is refused (deleted, a warning logged) and the prompt
read again, with the usage saying so. An idle unload and the load after it
find the state too.

Each server is the app in process on its state directory (the disk tier
in it, as ``missive serve`` keeps it there), one after the other: a stop
is the app's shutdown, which closes the model as SIGTERM does, and the
log checked is what its ``missive`` loggers wrote.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from prometheus_client.parser import text_string_to_metric_families

from missive.testing import InProcessApp, in_process_app, until
from missive_llamacpp.plugin import default_model_path

sys.path.insert(0, str(Path(__file__).parents[1] / "plugins" / "llamacpp" / "tests"))
from greedy_reference import assert_same_greedy_answer  # noqa: E402  (the llamacpp tests' near-tie rule)

MODEL = "smollm2-135m"
GREEDY = {"temperature": 0.0}
SYSTEM = "You are the archivist of a seed library. " + " ".join(
    f"Shelf {i} holds seeds of the {kind} family, sorted by the year they were gathered."
    for i, kind in enumerate(
        ["bean", "squash", "tomato", "pepper", "onion", "lettuce", "carrot", "radish"] * 5
    )
)
MESSAGES: list[dict[str, Any]] = [{"role": "user", "content": "Which shelf holds the tomato seeds?"}]


def config(**extra: Any) -> dict[str, Any]:
    return {
        "server": {"metrics_public": True},
        "models": {
            MODEL: {
                "driver": "llamacpp",
                "context_window": 4096,
                **extra,
                "settings": {"model_path": str(default_model_path()), "parallel": 1},
            }
        },
    }


def serve(state: Path, **extra: Any) -> AbstractContextManager[InProcessApp]:
    """The app of ``config(**extra)`` on the state directory ``state``."""
    env = {"MISSIVE_PROMPT_CACHE_DIR": str(state / "prompt-cache")}
    return in_process_app(config(**extra), state_dir=state, env=env)


def ask(server: InProcessApp, system: str = SYSTEM) -> anthropic.types.Message:
    client = server.sdk(timeout=600)
    return client.messages.create(
        model=MODEL, max_tokens=16, system=system, messages=MESSAGES, extra_body=GREEDY
    )


def metric(server: InProcessApp, name: str) -> float:
    text = server.http_client(timeout=30).get("/metrics").text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("model_name") == MODEL:
                return float(sample.value)
    return 0.0


def state_files(state: Path) -> list[Path]:
    return sorted((state / "prompt-cache").rglob("*.kv"))


@pytest.fixture(scope="module")
def first(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, anthropic.types.Message]]:
    """A state directory holding the state of the first answer's prompt, and that answer."""
    state = tmp_path_factory.mktemp("state")
    with serve(state) as server:
        answer = ask(server)
        assert answer.usage.cache_read_input_tokens == 0 and answer.usage.input_tokens > 500
    assert len(state_files(state)) == 1  # written when the model closed
    yield state, answer


def copy_of(state: Path, tmp_path: Path) -> Path:
    target = tmp_path / "state"
    shutil.copytree(state, target)
    return target


def test_a_restarted_server_reads_the_prompt_from_disk(
    first: tuple[Path, anthropic.types.Message], tmp_path: Path
) -> None:
    state, one = copy_of(first[0], tmp_path), first[1]
    prompt = one.usage.input_tokens
    with serve(state) as server:
        assert "(1 states found)" in server.log()
        assert "1 slot(s) given back their states from the disk tier" in server.log()
        two = ask(server)
        # The restored state's last token is decoded again for fresh logits.
        assert two.usage.cache_read_input_tokens >= prompt - 1, two.usage
        assert two.usage.input_tokens + two.usage.cache_read_input_tokens == prompt
        assert (
            metric(server, "missive:prompt_cache_disk_hits_total") == 0
        )  # the slot held it: no request read disk
        assert_same_greedy_answer(
            two.content[0].text,
            one.content[0].text,
            MESSAGES,
            SYSTEM,
            prompt,
            "after a restart, from the slot the disk tier filled at load",
        )


OTHER = SYSTEM.replace("archivist", "gardener")


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, anthropic.types.Message]]:
    """Two prompts, one slot: the first leaves the slot for the second (the
    host cache writes it through to disk), the second is in the slot at the
    stop. The state directory, and the first prompt's answer."""
    state = tmp_path_factory.mktemp("state")
    with serve(state) as server:
        one = ask(server)
        ask(server, OTHER)
    assert len(state_files(state)) == 2
    yield state, one


@pytest.mark.parametrize("damage", [False, True])
def test_a_state_not_in_a_slot_is_read_from_disk_after_a_restart(
    two: tuple[Path, anthropic.types.Message], tmp_path: Path, damage: bool
) -> None:
    """After a restart the slot holds the second prompt; the first is read
    from its file by the request that asks it again. Damaged after the
    index was read, the file is refused only then: the reuse announced in
    ``message_start`` is corrected in the final usage, the prompt read."""
    state, one = copy_of(two[0], tmp_path), two[1]
    older = min(state_files(state), key=lambda p: p.stat().st_mtime)
    with serve(state) as server:
        assert "1 slot(s) given back their states from the disk tier" in server.log()
        if damage:
            data = bytearray(older.read_bytes())
            data[len(data) // 2] ^= 0x5A
            older.write_bytes(bytes(data))
        again = ask(server)
        if damage:
            # only the few tokens the slot's other prompt shares with it ("<|im_start|>system\nYou are the")
            assert again.usage.cache_read_input_tokens < 16, again.usage
            assert metric(server, "missive:prompt_cache_disk_corrupt_total") == 1
            assert not older.exists()
        else:
            assert again.usage.cache_read_input_tokens >= one.usage.input_tokens - 1, again.usage
            assert metric(server, "missive:prompt_cache_disk_hits_total") == 1
        assert again.usage.input_tokens + again.usage.cache_read_input_tokens == one.usage.input_tokens
        assert_same_greedy_answer(
            again.content[0].text,
            one.content[0].text,
            MESSAGES,
            SYSTEM,
            one.usage.input_tokens,
            "after a restart, from the disk tier",
        )


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_state_file_is_refused(
    first: tuple[Path, anthropic.types.Message], tmp_path: Path, damage: str
) -> None:
    """A flipped byte in the state is found when the file is read back to
    fill the slot at load; a truncated file when the index is read. Either
    way the request reads the whole prompt and says so."""
    state, one = copy_of(first[0], tmp_path), first[1]
    (path,) = state_files(state)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x5A
    else:
        del data[-4096:]
    path.write_bytes(bytes(data))
    with serve(state) as server:
        two = ask(server)
        assert two.usage.cache_read_input_tokens == 0, two.usage  # what was truly read
        assert two.usage.input_tokens == one.usage.input_tokens
        assert_same_greedy_answer(
            two.content[0].text,
            one.content[0].text,
            MESSAGES,
            SYSTEM,
            one.usage.input_tokens,
            "after a refused state file",
        )
        assert metric(server, "missive:prompt_cache_disk_corrupt_total") == 1
        assert f"prompt cache: dropped {path}" in server.log()
        assert not path.exists()


def test_an_idle_unload_and_the_load_after_it_find_the_state(tmp_path: Path) -> None:
    with serve(tmp_path, idle_unload=1.0) as server:
        one = ask(server)
        until(lambda: metric(server, "missive:model_unloads_total") >= 1, "the model unloaded when idle")
        assert len(state_files(tmp_path)) == 1
        two = ask(server)
        assert two.usage.cache_read_input_tokens >= one.usage.input_tokens - 1, two.usage
        assert_same_greedy_answer(
            two.content[0].text,
            one.content[0].text,
            MESSAGES,
            SYSTEM,
            one.usage.input_tokens,
            "after an idle unload",
        )
