"""Settings validation on its own, and the README's settings table in step with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from missive.api import ConfigError
from missive_markov.settings import MarkovSettings, parse_settings


def test_defaults_and_a_trailing_slash() -> None:
    settings = parse_settings("m", {"base_url": "http://127.0.0.1:8700/"})
    assert (
        settings.base_url == "http://127.0.0.1:8700" and settings.seed is None and settings.retry_after == 5
    )


@pytest.mark.parametrize(
    ("settings", "wording"),
    [
        ({}, "settings.base_url: Field required"),
        (
            {"base_url": "http://x", "read_timeout": 0},
            "settings.read_timeout: Input should be greater than 0",
        ),
        (
            {"base_url": "http://x", "retry_after": 61},
            "settings.retry_after: Input should be less than or equal to 60",
        ),
    ],
)
def test_bad_settings_name_the_model_and_the_key(settings: dict[str, object], wording: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_settings("markov", settings)
    assert str(caught.value).startswith("model 'markov': invalid markov setting ") and wording in str(
        caught.value
    )


def test_readme_lists_every_setting() -> None:
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    table = readme.split("| Key | Default | Meaning |", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE)) == set(MarkovSettings.model_fields)
