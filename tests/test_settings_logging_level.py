"""`logging.level` in the capitals Python's logging writes (`INFO`, `WARNING`) is that level."""

from __future__ import annotations

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


@pytest.mark.parametrize(("written", "level"), [("INFO", "info"), ("Warning", "warning"),
                                                ("debug", "debug"), ("ERROR", "error")])
def test_a_level_is_read_whatever_its_case(written: str, level: str) -> None:
    settings = parse_settings(yaml.safe_load(BASE + f"logging:\n  level: {written}\n"), {})
    assert settings.logging.level == level


def test_an_unknown_level_is_still_refused_naming_the_choices() -> None:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(BASE + "logging:\n  level: LOUD\n"), {})
    assert error.value.problems == [
        "logging.level: must be one of debug, info, warning, error, got 'LOUD'"]
