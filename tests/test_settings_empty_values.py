"""Keys whose empty value would silently mean something else are refused, naming the key.

`server.host: ""` (or an empty `${HOST}`) listened on every interface (asyncio binds all of
them for an empty host), and `state.path: ""` put the state in the working directory."""

from __future__ import annotations

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def problems_of(text: str, **env: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(BASE + text), env)
    return error.value.problems


@pytest.mark.parametrize("value", ['""', '"  "', "${HOST}"])
def test_an_empty_listen_host_is_refused(value: str) -> None:
    problems = problems_of(f"server:\n  host: {value}\n", HOST="")
    assert len(problems) == 1 and problems[0].startswith("server.host: must not be empty")
    assert "0.0.0.0" in problems[0]


@pytest.mark.parametrize("value", ['""', '"  "', "${STATE_DIR}"])
def test_an_empty_state_path_is_refused(value: str) -> None:
    problems = problems_of(f"state:\n  path: {value}\n", STATE_DIR="")
    assert len(problems) == 1 and problems[0].startswith("state.path: must not be empty")


def test_every_interface_and_the_working_directory_can_still_be_asked_for() -> None:
    settings = parse_settings(yaml.safe_load(BASE + "server:\n  host: 0.0.0.0\n"
                                             "state:\n  path: .\n"), {})
    assert settings.server.host == "0.0.0.0" and settings.state.path == "."
