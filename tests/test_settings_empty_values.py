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


@pytest.mark.parametrize("value", ['""', "${U}"])
def test_a_route_to_an_empty_upstream_name_is_refused(value: str) -> None:
    # It passed, and every request it matched failed with a KeyError (a 500).
    problems = problems_of(f"routes:\n  - model: '*'\n    upstream: {value}\n", U="")
    assert problems == ["routes[0].upstream: no upstream named '' (known: u)"]


def test_an_empty_summarizer_model_is_refused() -> None:
    problems = problems_of("compaction:\n  summarizer:\n    model: ''\n")
    assert problems == ["compaction.summarizer.model: must not be empty (null: the request's "
                        "own model)"]


@pytest.mark.parametrize(("key", "value"), [("headers", "x-thread id"), ("headers", "x:id"),
                                            ("body_fields", ".a"), ("body_fields", "a..b"),
                                            ("body_fields", "a.")])
def test_thread_headers_and_body_fields_that_can_never_match_are_refused(
        key: str, value: str) -> None:
    problems = problems_of(f"threads:\n  {key}: [ok, '{value}']\n")
    assert len(problems) == 1 and problems[0].startswith(f"threads.{key}: "), problems
    assert repr(value) in problems[0]
