"""The mistakes a new user makes in the config: each is named with its key or line and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.settings import ConfigError, load_settings, parse_settings
from tests.process import cli, write_config

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def _problems(config: Path, text: str) -> list[str]:
    config.write_text(text)
    with pytest.raises(ConfigError) as error:
        load_settings(config, {})
    return error.value.problems


@pytest.mark.parametrize("text, where, hint", [
    (BASE + "server:\n  host: 127.0.0.1  # listen address\n   port: 8787\n", "line 6, column 4",
     "check the indentation: the keys of one mapping line up"),
    (BASE + "routes:\n  - model: '*'\n   upstream: u\n", "line 6, column 4",
     "check the indentation: the keys of one mapping line up"),
    (BASE + "server:\n  host: 127.0.0.1\n   port: 8787\n", "line 6, column 8",
     "a key indented deeper than the one above it, or a value holding ': ' (quote it)"),
], ids=["one space too many", "a list item's key", "one space too many, no comment"])
def test_an_indentation_slip_is_named_as_one(tmp_path: Path, text: str, where: str,
                                             hint: str) -> None:
    config = tmp_path / "indent.yaml"
    [problem] = _problems(config, text)
    assert problem.startswith(f"<file>: {config} is not valid YAML: "), problem
    assert problem.endswith(f"({where}): {hint}"), problem


def test_a_tab_is_named_with_the_fix(tmp_path: Path) -> None:
    config = tmp_path / "tab.yaml"
    [problem] = _problems(config, BASE + "server:\n\tport: 8787\n")
    assert "(line 5, column 1)" in problem
    assert "YAML indents with spaces, not tabs" in problem, problem


@pytest.mark.parametrize("text, expected", [
    (BASE + "server:\n  prot: 1\n", "server.prot: unknown key (did you mean port?)"),
    (BASE + "models:\n  m:\n    max_input_token: 9000\n",
     "models.m.max_input_token: unknown key (did you mean max_input_tokens?)"),
    (BASE + "compaction:\n  triger_ratio: 0.5\n",
     "compaction.triger_ratio: unknown key (did you mean trigger_ratio?)"),
    (BASE + "server:\n  colour: blue\n", "server.colour: unknown key"),
])
def test_a_misspelt_key_is_answered_with_the_likely_one(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(text), {})
    assert error.value.problems == [expected]


@pytest.mark.parametrize("url, warned", [
    ("http://127.0.0.1:9000", True),
    ("http://127.0.0.1:9000/", True),
    ("http://127.0.0.1:9000/v1", False),
    ("https://openrouter.ai/api/v1", False),
    ("https://example.openai.azure.com/openai/v1?api-version=preview", False),
])
def test_a_base_url_without_a_path_is_warned_about(url: str, warned: bool) -> None:
    settings = parse_settings(yaml.safe_load(
        f"upstreams:\n  u:\n    base_url: '{url}'\n"), {})
    warning = ("upstreams.u.base_url: has no path, so a client's /v1/chat/completions goes to "
               "/chat/completions upstream; most OpenAI-compatible servers need the /v1 base "
               "(write .../v1), unless yours answers at its root")
    assert (warning in settings.warnings) is warned, settings.warnings


def test_check_config_prints_the_base_url_warning(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9000", tmp_path / "state")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "upstreams.fake.base_url: has no path" in result.stderr


@pytest.mark.parametrize("models, shadowed", [
    ({"gpt-4o*": 128000, "gpt-4o-mini*": 64000}, ["gpt-4o-mini*"]),
    ({"*": 8000, "small-?": 4000, "exact-name": 2000}, ["small-?"]),
    ({"o*": 200000, "o[134]*": 100000}, ["o[134]*"]),
    ({"gpt-4o-mini*": 64000, "gpt-4o*": 128000}, []),
    ({"gpt-4o": 128000, "gpt-4o*": 64000}, []),
    ({"gpt-4.1*": 1000000, "gpt-5*": 272000, "o[134]*": 200000}, []),
])
def test_a_model_glob_an_earlier_one_always_takes_is_warned_about(models: dict[str, int],
                                                                    shadowed: list[str]) -> None:
    text = BASE + "models:\n" + "".join(f"  '{name}':\n    max_input_tokens: {tokens}\n"
                                        for name, tokens in models.items())
    warnings = parse_settings(yaml.safe_load(text), {}).warnings
    assert [w.split(": ", 1)[0] for w in warnings] == [f"models.{name}" for name in shadowed]
    assert all("never used" in w and "list the narrower one first" in w for w in warnings)


def test_an_unset_variable_says_how_to_set_it_or_default_it() -> None:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load("upstreams:\n  u:\n    base_url: ${MY_UPSTREAM}\n"), {})
    assert error.value.problems == [
        "upstreams.u.base_url: environment variable MY_UPSTREAM is not set (export it, or give "
        "a default: ${MY_UPSTREAM:-value})"]


@pytest.mark.parametrize("text", ["", "server:\n  port: 8787\n"], ids=["empty file", "no upstreams"])
def test_a_config_without_upstreams_shows_what_one_looks_like(tmp_path: Path, text: str) -> None:
    problems = _problems(tmp_path / "p.yaml", text)
    assert problems == ["upstreams: at least one upstream is required, such as "
                        "{openai: {base_url: 'https://api.openai.com/v1'}}"]


@pytest.mark.parametrize("url, endpoint", [
    ("https://api.openai.com/v1/chat/completions", "/chat/completions"),
    ("https://api.openai.com/v1/responses/", "/responses"),
    ("https://h/openai/v1/completions?api-version=1", "/completions"),
    ("https://api.openai.com/v1", None),
    ("https://h/v1/responses-gateway", None),
])
def test_a_base_url_that_names_an_endpoint_is_warned_about(url: str, endpoint: str | None) -> None:
    # A pasted endpoint URL: the client's own path goes below it (.../completions/chat/completions).
    settings = parse_settings(yaml.safe_load(f"upstreams:\n  u:\n    base_url: '{url}'\n"), {})
    warning = (f"upstreams.u.base_url: ends with the endpoint {endpoint}, but each client's "
               f"path goes below the base_url (a client's /v1{endpoint} would go to "
               f"...{endpoint}{endpoint}): write the /v1 base without {endpoint}")
    assert (warning in settings.warnings) is (endpoint is not None), settings.warnings
    assert len(settings.warnings) == (endpoint is not None)
