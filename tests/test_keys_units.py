"""Units of core/missive/keys/: the ``[keys.NAME]`` configuration, the key
ring (who a request is), the token buckets and limits on a clock the test
moves, the table shared across a fork, the usage store, and the
``missive keys`` commands."""

from __future__ import annotations

import hashlib
import os
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from missive.cli.main import cli
from missive.config import ConfigError, load_config
from missive.config.keys import derived_name, hash_key
from missive.keys import limits as limits_module
from missive.keys.buckets import SharedTable
from missive.keys.limits import Limiter, RateLimited
from missive.keys.ring import ANONYMOUS, ConflictingKeys, KeyRing
from missive.keys.usage import UsageStore, parse_time
from missive.protocol.errors import AuthenticationError, InvalidRequestError

try:
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def config(text: str, **environ: str) -> Any:
    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"missive-keys-{os.getpid()}.toml"
    path.write_text(text)
    try:
        return load_config(path, environ=environ)
    finally:
        path.unlink()


H = hash_key("sk-alice")


def test_a_keys_table_and_what_it_refuses() -> None:
    loaded = config(
        f'[keys.alice]\nkey_sha256 = "{H.upper()}"\nmodels = ["echo*"]\nrequests_per_minute = 5\n'
    )
    entry = loaded.keys["alice"]
    assert (entry.key_sha256, entry.scope, entry.models, entry.limits()) == (
        H,
        "user",
        ["echo*"],
        {"requests_per_minute": 5},
    )
    for text, words in (
        ('[keys.alice]\nkey_sha256 = "sk-alice"\n', "64 hex digits"),
        (f'[keys."bad name"]\nkey_sha256 = "{H}"\n', "key name 'bad name'"),
        (f'[keys.key-0123456789ab]\nkey_sha256 = "{H}"\n', "server.api_keys; choose another"),
        (f'[keys.alice]\nkey_sha256 = "{H}"\nscope = "root"\n', "keys.alice.scope"),
        (f'[keys.alice]\nkey_sha256 = "{H}"\nrequests_per_minute = 0\n', "keys.alice.requests_per_minute"),
        (f'[keys.alice]\nkey_sha256 = "{H}"\nlimit = 3\n', "keys.alice.limit"),
        (f'[keys.a]\nkey_sha256 = "{H}"\n[keys.b]\nkey_sha256 = "{H}"\n', "keys.b is the same key as keys.a"),
        (
            f'[server]\napi_keys = ["sk-alice"]\n[keys.a]\nkey_sha256 = "{H}"\n',
            "server.api_keys[0] is the same key as keys.a",
        ),
    ):
        with pytest.raises(ConfigError, match="invalid configuration") as info:
            config(text)
        assert words in str(info.value), str(info.value)


def test_named_keys_alone_allow_binding_beyond_loopback() -> None:
    bound = config(f'[server]\nhost = "0.0.0.0"\n[keys.alice]\nkey_sha256 = "{H}"\n')
    bound.check_bind()
    with pytest.raises(ConfigError, match=r"add \[keys.NAME\] tables"):
        config('[server]\nhost = "0.0.0.0"\n').check_bind()


def test_keys_from_the_environment() -> None:
    loaded = config("", MISSIVE__KEYS__OPS__KEY_SHA256=H, MISSIVE__KEYS__OPS__SCOPE="admin")
    assert loaded.keys["ops"].scope == "admin"


def test_the_ring_names_each_key_and_compares_hashes() -> None:
    loaded = config(
        f'[server]\napi_keys = ["sk-plain"]\n[keys.alice]\nkey_sha256 = "{H}"\nscope = "admin"\n'
        f'[keys.off]\nkey_sha256 = "{hash_key("sk-off")}"\nenabled = false\n'
    )
    ring = KeyRing(loaded)
    assert ring.identify({"x-api-key": "sk-alice"}).name == "alice"
    assert ring.identify({"x-api-key": "sk-alice"}).admin
    plain = ring.identify({"authorization": "Bearer sk-plain"})
    assert plain.name == derived_name("sk-plain") and not plain.admin
    # Both headers: either matching is enough; the same key in both is one key;
    # two different keys are refused (whose request is it?).
    assert ring.identify({"x-api-key": "nope", "authorization": "Bearer sk-plain"}).name == plain.name
    assert ring.identify({"x-api-key": "sk-alice", "authorization": "Bearer sk-alice"}).name == "alice"
    with pytest.raises(ConflictingKeys, match="name different API keys"):
        ring.identify({"x-api-key": "sk-alice", "authorization": "Bearer sk-plain"})
    # A header repeated with different values (kept apart by Werkzeug's
    # Headers, as Quart gives them) is refused, in either order: the owner of
    # the request's batches and threads must not depend on header order.
    from werkzeug.datastructures import Headers

    for name, first, second in (
        ("x-api-key", "sk-alice", "sk-plain"),
        ("authorization", "Bearer sk-alice", "Bearer sk-plain"),
        ("x-api-key", "sk-alice", "garbage"),
    ):
        for pair in ((first, second), (second, first)):
            with pytest.raises(ConflictingKeys, match=f"sends 2 different {name} headers; send one key"):
                ring.identify(Headers([(name, pair[0]), (name, pair[1])]))
    assert ring.identify(Headers([("x-api-key", "sk-alice"), ("x-api-key", "sk-alice")])).name == "alice"
    for headers, message in (
        ({}, "x-api-key header is required"),
        ({"x-api-key": "nope"}, "invalid x-api-key"),
        ({"authorization": "Basic sk-alice"}, "x-api-key header is required"),
        ({"x-api-key": "sk-off"}, "API key 'off' is disabled"),
    ):
        with pytest.raises(AuthenticationError, match=message):
            ring.identify(headers)
    assert KeyRing(config("")).identify({}) is ANONYMOUS and ANONYMOUS.admin


def test_derived_names_are_stable_and_not_the_hash() -> None:
    assert derived_name("sk-plain") == derived_name("sk-plain") != derived_name("sk-plain2")
    assert derived_name("sk-plain")[4:] not in hash_key("sk-plain")


class Clock:
    """``time.monotonic`` and ``time.time`` the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(limits_module.time, "monotonic", fake)
    return fake


def limiter(**limits: int) -> tuple[Limiter, Any]:
    loaded = config(f'[keys.k]\nkey_sha256 = "{H}"\n' + "".join(f"{k} = {v}\n" for k, v in limits.items()))
    ring = KeyRing(loaded)
    refused: list[tuple[str, str]] = []
    return Limiter(ring.identities, on_refused=lambda k, f: refused.append((k, f))), ring.by_name["k"]


def test_requests_per_minute_refill_continuously(clock: Clock) -> None:
    limits, key = limiter(requests_per_minute=2)
    first = limits.admit(key)
    assert first is not None and first.headers["anthropic-ratelimit-requests-remaining"] == "1"
    limits.admit(key)
    with pytest.raises(RateLimited) as info:
        limits.admit(key)
    assert info.value.retry_after == 30 and info.value.limit == "requests_per_minute"
    assert info.value.headers["anthropic-ratelimit-requests-remaining"] == "0"
    clock.now += 29.0
    with pytest.raises(RateLimited) as info:
        limits.admit(key)
    assert info.value.retry_after == 1
    clock.now += 1.0
    assert limits.admit(key) is not None


def test_tokens_are_counted_when_an_answer_ends(clock: Clock) -> None:
    limits, key = limiter(input_tokens_per_minute=5, output_tokens_per_day=100)
    ticket = limits.admit(key)
    assert ticket is not None
    assert limits.admit(key) is not None  # nothing counted yet: still admitted
    ticket.finish(8, 10)
    ticket.finish(8, 10)  # once only
    with pytest.raises(RateLimited) as info:
        limits.admit(key)
    assert (info.value.limit, info.value.retry_after) == (
        "input_tokens_per_minute",
        48,
    )  # -3 to +1 at 5/60 per s
    headers = info.value.headers
    assert headers["anthropic-ratelimit-input-tokens-remaining"] == "0"
    assert headers["anthropic-ratelimit-output-tokens-remaining"] == "90"
    assert headers["anthropic-ratelimit-tokens-limit"] == "5"  # the most restrictive in effect
    clock.now += 48.0
    assert limits.admit(key) is not None


def test_concurrent_requests_end_with_their_ticket(clock: Clock) -> None:
    limits, key = limiter(concurrent_requests=1)
    ticket = limits.admit(key)
    assert ticket is not None and ticket.headers == {}
    with pytest.raises(RateLimited) as info:
        limits.admit(key)
    assert (info.value.limit, info.value.retry_after) == ("concurrent_requests", 1)
    ticket.finish(0, 0)
    again = limits.admit(key)
    assert again is not None


def test_a_key_without_limits_has_no_ticket() -> None:
    limits, _ = limiter()
    assert limits.admit(ANONYMOUS) is None


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_the_table_is_shared_with_forked_processes() -> None:
    """A child forked after the table was made and the parent each add 1
    to one cell 2,000 times under the lock: the cell ends at 4,000."""
    table = SharedTable(1)

    def add(times: int) -> None:
        for _ in range(times):
            with table.locked() as cells:
                cells[0] = cells[0] + 1

    pid = os.fork()
    if pid == 0:
        try:
            add(2000)
        finally:
            os._exit(0)
    add(2000)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert table.cells[0] == 4000


def test_the_usage_store_adds_prunes_and_filters(tmp_path: Path) -> None:
    store = UsageStore(tmp_path / "usage.sqlite3")
    store.add({(3600, "alice", "echo", 0): [1, 10, 0, 2, 5]})
    store.add(
        {
            (3600, "alice", "echo", 0): [2, 20, 1, 0, 5],
            (3600, "alice", "echo", 1): [1, 2, 3, 4, 5],  # a subagent's: a row of its own
            (7200, "bob", "echo", 0): [1, 1, 1, 1, 1],
        }
    )
    assert store.rows(0, 10_000, None, None) == [
        (3600, "alice", "echo", 0, 3, 30, 1, 2, 10),
        (3600, "alice", "echo", 1, 1, 2, 3, 4, 5),
        (7200, "bob", "echo", 0, 1, 1, 1, 1, 1),
    ]
    assert store.rows(0, 10_000, "bob", None) == [(7200, "bob", "echo", 0, 1, 1, 1, 1, 1)]
    assert store.rows(7200, 10_000, None, "echo") == [(7200, "bob", "echo", 0, 1, 1, 1, 1, 1)]
    assert store.prune(7200) == 2 and store.rows(0, 10_000, None, None)[0][0] == 7200
    store.close()


def test_usage_times() -> None:
    default = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert parse_time("t", None, default) == default
    assert parse_time("t", "2026-05-04T10:00:00Z", default) == datetime(2026, 5, 4, 10, tzinfo=timezone.utc)
    assert parse_time("t", "2026-05-04", default) == datetime(2026, 5, 4, tzinfo=timezone.utc)
    assert abs(parse_time("t", "2h", default).timestamp() - (time.time() - 7200)) < 60
    with pytest.raises(InvalidRequestError, match="t: expected an RFC 3339 time"):
        parse_time("t", "yesterday", default)


def test_missive_keys_new_prints_the_key_once_and_its_table(tmp_path: Path) -> None:
    made = CliRunner().invoke(cli, ["keys", "new", "alice", "--scope", "admin", "--model", "echo"])
    assert made.exit_code == 0, made.output
    key = made.stderr.strip().rsplit(" ", 1)[1]
    assert key.startswith("sk-missive-") and len(key) > 40 and key not in made.stdout
    table = tomllib.loads(made.stdout)["keys"]["alice"]
    assert table == {
        "key_sha256": hashlib.sha256(key.encode()).hexdigest(),
        "scope": "admin",
        "models": ["echo"],
    }
    path = tmp_path / "missive.toml"
    path.write_text(made.stdout)
    ring = KeyRing(load_config(path, environ={}))
    assert ring.identify({"x-api-key": key}).admin
    listed = CliRunner().invoke(cli, ["keys", "list", "--config", str(path)])
    assert listed.exit_code == 0 and listed.output.startswith("alice  admin  models=echo")
    assert table["key_sha256"] not in listed.output
    refused = CliRunner().invoke(cli, ["keys", "new", "key-0123456789ab"])
    assert refused.exit_code == 2 and "choose another" in refused.output


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX")
def test_missive_keys_new_makes_a_new_key_each_time() -> None:
    first = CliRunner().invoke(cli, ["keys", "new", "a"]).stderr
    second = CliRunner().invoke(cli, ["keys", "new", "a"]).stderr
    assert first != second


def test_missive_keys_list_says_when_no_key_is_configured(tmp_path: Path) -> None:
    path = tmp_path / "missive.toml"
    path.write_text('[models.echo]\ndriver = "echo"\n')
    listed = CliRunner().invoke(cli, ["keys", "list", "--config", str(path)])
    assert listed.exit_code == 0 and listed.stdout == ""
    assert "no keys configured" in listed.stderr and "missive keys new" in listed.stderr
    assert CliRunner().invoke(cli, ["keys", "list", "--json", "--config", str(path)]).stdout.strip() == "[]"


def test_cache_scopes_of_keys() -> None:
    """A key's prompt-cache scope (docs/configuration.md#keysname): its own by
    default (a table's and a plain key's alike), a named one shared by the
    keys naming it and apart from any key's own, none on an open server."""
    from missive.config.keys import cache_scope_of

    loaded = config(
        f"""
[server]
api_keys = ["sk-plain"]
[keys.alice]
key_sha256 = "{hash_key("sk-a")}"
[keys.bob]
key_sha256 = "{hash_key("sk-b")}"
cache_scope = "alice"
[keys.carol]
key_sha256 = "{hash_key("sk-c")}"
cache_scope = "alice"
"""
    )
    scopes = {name: cache_scope_of(loaded.keys, name) for name in ("alice", "bob", "carol")}
    plain = derived_name("sk-plain")
    assert scopes["bob"] == scopes["carol"] != scopes["alice"]  # a scope named "alice" is not alice's own
    assert cache_scope_of(loaded.keys, plain) not in (None, *scopes.values())
    assert cache_scope_of(loaded.keys, "") is None and cache_scope_of(loaded.keys, None) is None
    with pytest.raises(ConfigError, match="cache_scope"):
        config(f'[keys.dave]\nkey_sha256 = "{hash_key("sk-d")}"\ncache_scope = "a b"\n')


def test_missive_keys_list_shows_a_shared_cache_scope(tmp_path: Path) -> None:
    path = tmp_path / "missive.toml"
    path.write_text(f'[keys.bob]\nkey_sha256 = "{hash_key("sk-b")}"\ncache_scope = "team-a"\n')
    listed = CliRunner().invoke(cli, ["keys", "list", "--config", str(path)])
    assert listed.exit_code == 0 and listed.output.startswith("bob  user  models=*  cache_scope=team-a")
    as_json = CliRunner().invoke(cli, ["keys", "list", "--json", "--config", str(path)]).stdout
    assert '"cache_scope": "team-a"' in as_json
