"""Config from TOML, environment and CLI, in that order of precedence."""

from __future__ import annotations

from pathlib import Path

import pytest

from missive.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "missive.toml"
    path.write_text(text)
    return path


def test_file_env_cli_precedence(tmp_path: Path) -> None:
    path = write(tmp_path, '[server]\nport = 1000\nhost = "127.0.0.1"\n[models.m]\ndriver = "echo"\n')
    env = {"MISSIVE__SERVER__PORT": "2000", "MISSIVE__SERVER__STRICT": "true"}
    assert load_config(path, environ={}).server.port == 1000
    config = load_config(path, environ=env)
    assert config.server.port == 2000 and config.server.strict is True
    config = load_config(path, environ=env, overrides=["server.port=3000"])
    assert config.server.port == 3000


def test_quoted_model_ids_and_values(tmp_path: Path) -> None:
    config = load_config(
        None,
        environ={},
        overrides=[
            'models."qwen2.5".driver=echo',
            'models."qwen2.5".aliases=["claude-*", "q*"]',
            'models."qwen2.5".context_window=4096',
        ],
    )
    entry = config.models["qwen2.5"]
    assert entry.driver == "echo" and entry.aliases == ["claude-*", "q*"] and entry.context_window == 4096


def test_api_key_env(tmp_path: Path) -> None:
    assert load_config(None, environ={"MISSIVE_API_KEY": "a, b"}).server.api_keys == ["a", "b"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("[server]\nport = 'x'\n", "server.port"),
        ("[server]\nnope = 1\n", "server.nope"),
        ("[server\n", "not valid TOML"),
        ("[models.m]\ncontext_window = 5\n", "models.m.driver"),
        ("[server]\nlog_level = 'loud'\n", "server.log_level"),
        ("[server]\nqueue_depth = -1\n", "server.queue_depth"),
        ("[server]\nqueue_timeout = 0\n", "server.queue_timeout"),
        ("[models.m]\ndriver = 'echo'\nqueue_depth = -1\n", "models.m.queue_depth"),
        ("[server]\nlog_format = 'xml'\n", "server.log_format"),
        ("[server]\nmetrics_public = 'sometimes'\n", "server.metrics_public"),
        ("[server]\nmetrics_public = 'yes'\n", "server.metrics_public: Input should be a valid boolean"),
        ("[server]\napi_keys = ['k', '']\n", "server.api_keys: Value error, an API key is empty or blank"),
        ("[media]\nfetch_allow = ['not a host!!']\n", "media.fetch_allow: bad entry 'not a host!!'"),
    ],
)
def test_bad_config_names_the_key(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, text), environ={})
    assert fragment in str(info.value)


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "missive.toml"
    path.write_bytes(b"[server]\nport = 1\n\xff\xfe x")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        load_config(path, environ={})


def test_operations_keys(tmp_path: Path) -> None:
    """server.log_format and server.metrics_public default to text and false,
    read from the file (log_format in any case) and from the environment."""
    defaults = load_config(None, environ={}).server
    assert (defaults.log_format, defaults.metrics_public) == ("text", False)
    config = load_config(
        write(tmp_path, "[server]\nlog_format = 'JSON'\n"),
        environ={"MISSIVE__SERVER__METRICS_PUBLIC": "true"},
    )
    assert (config.server.log_format, config.server.metrics_public) == ("json", True)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config("/nonexistent/missive.toml", environ={})


def test_bind_rule() -> None:
    load_config(None, environ={}).check_bind()
    with pytest.raises(ConfigError, match="without API keys"):
        load_config(None, environ={}, overrides=["server.host=0.0.0.0"]).check_bind()
    load_config(None, environ={}, overrides=["server.host=0.0.0.0", 'server.api_keys=["k"]']).check_bind()
    load_config(
        None, environ={}, overrides=["server.host=::", "server.allow_unauthenticated_remote=true"]
    ).check_bind()


# --- where the file is found ------------------------------------------------


def test_search_path_follows_xdg(tmp_path: Path) -> None:
    """The user's file under $XDG_CONFIG_HOME (absolute only, as the XDG Base
    Directory specification says), else under $HOME/.config; the system's last."""
    from missive.config import SYSTEM_CONFIG, config_search_path

    assert SYSTEM_CONFIG == Path("/etc/missive/missive.toml")
    xdg = tmp_path / "xdg"
    assert config_search_path({"XDG_CONFIG_HOME": str(xdg), "HOME": "/home/u"}) == [
        xdg / "missive" / "missive.toml",
        SYSTEM_CONFIG,
    ]
    for unset in ({}, {"XDG_CONFIG_HOME": ""}, {"XDG_CONFIG_HOME": "relative/dir"}):
        assert config_search_path({**unset, "HOME": "/home/u"}) == [
            Path("/home/u/.config/missive/missive.toml"),
            SYSTEM_CONFIG,
        ]


def _model_file(folder: Path, model: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return write(folder, f'[models.{model}]\ndriver = "echo"\n')


def test_search_order(tmp_path: Path) -> None:
    """--config, then $MISSIVE_CONFIG, then the user's file, then the
    system's, then none; searching happens only when asked for."""
    user = _model_file(tmp_path / "user", "from-user")
    system = _model_file(tmp_path / "system", "from-system")
    given = _model_file(tmp_path / "given", "from-option")
    env_file = _model_file(tmp_path / "env", "from-env")
    both = [user, system]

    def served(
        path: Path | None = None,
        environ: dict[str, str] | None = None,
        search_path: list[Path] = both,
        search: bool = True,
    ) -> tuple[list[str], str | None]:
        config = load_config(path, environ=environ or {}, search=search, search_path=search_path)
        return list(config.models), config.source

    assert served(given, {"MISSIVE_CONFIG": str(env_file)}) == (["from-option"], str(given))
    assert served(None, {"MISSIVE_CONFIG": str(env_file)}) == (["from-env"], str(env_file))
    assert served() == (["from-user"], str(user))
    assert served(search_path=[tmp_path / "nothing.toml", system]) == (["from-system"], str(system))
    assert served(search_path=[tmp_path / "nothing.toml"]) == ([], None)
    assert served(search=False) == ([], None)  # a library caller gets no file it did not ask for
    # a found file is read like a given one: its errors are reported, not skipped
    (tmp_path / "user" / "missive.toml").write_text("[server\n")
    with pytest.raises(ConfigError, match=f"config file {user} is not valid TOML"):
        served()


def test_search_path_from_the_environment(tmp_path: Path) -> None:
    """Without search_path, $XDG_CONFIG_HOME decides where the user's file is."""
    path = _model_file(tmp_path / "missive", "mine")
    config = load_config(environ={"XDG_CONFIG_HOME": str(tmp_path)}, search=True)
    assert config.source == str(path) and list(config.models) == ["mine"]


def test_a_key_with_an_empty_name_is_refused() -> None:
    with pytest.raises(ConfigError, match="bad configuration key 'server..port'"):
        load_config(None, environ={}, overrides=["server..port=1"])
