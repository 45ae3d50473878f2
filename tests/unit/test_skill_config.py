"""`[skills]` (the curator's days) and a profile's `skills_write` in config.toml."""

from __future__ import annotations

import pytest

from kanban.state.config import SkillSettings
from kanban.state.config_parse import parse_config
from kanban.state.errors import ConfigError


def test_skill_keys_are_parsed_with_safe_defaults() -> None:
    config = parse_config({"skills": {"stale_after_days": 7, "archive_after_days": 21.5},
                           "profiles": {"writer": {"skills_write": True}}})
    assert config.skills == SkillSettings(stale_after_days=7.0, archive_after_days=21.5)
    assert config.profiles["writer"].skills_write is True
    defaults = parse_config({})
    assert defaults.skills == SkillSettings(30.0, 90.0)
    assert not any(p.skills_write for p in defaults.profiles.values())  # off by default


@pytest.mark.parametrize(("raw", "message"), [
    ({"skills": {"stale_after_days": 0}}, "[skills].stale_after_days must be a positive"),
    ({"skills": {"archive_after_days": 10**6}}, "archive_after_days = 1e+06 is out of range"),
    ({"skills": {"stale_after_days": 40, "archive_after_days": 20}},
     "[skills].archive_after_days must be at least stale_after_days"),
    ({"skills": {"stale_after": 3}}, "[skills]: unknown key 'stale_after'"),
    ({"skills": []}, "[skills] must be a table"),
    ({"profiles": {"p": {"skills_write": "yes"}}}, "[profiles.p].skills_write must be true or"),
])
def test_bad_skill_keys_are_refused(raw: dict, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(raw)
    assert message in caught.value.message
