"""`${VAR}` references: `$${` writes a literal `${`, and a `${` the proxy does not read (a
shell form it does not support, a nested reference, a malformed name) is a problem naming the
key, never text sent on as it is (an `api_key: ${KEY-default}` went upstream as that text)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from proxy.settings import ConfigError, Settings, parse_settings
from tests.process import cli

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"
SUPPORTED = "write ${VAR} or ${VAR:-default}, or $${ for a literal ${"


def settings_of(text: str, **env: str) -> Settings:
    return parse_settings(yaml.safe_load(text), env)


def problems_of(text: str, **env: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(text), env)
    return error.value.problems


def api_key_of(value: str, **env: str) -> str | None:
    return settings_of(BASE + f"    api_key: '{value}'\n", **env).upstreams["u"].api_key


@pytest.mark.parametrize("written, meant", [
    ("$${KEY}", "${KEY}"),
    ("pa$${KEY}ss", "pa${KEY}ss"),
    ("$${KEY}-${KEY}", "${KEY}-value"),
    ("pa$$word", "pa$$word"),  # a `$$` not before `{` is plain text
    ("pa$word", "pa$word"),
])
def test_a_doubled_dollar_writes_a_literal_reference(written: str, meant: str) -> None:
    assert api_key_of(written, KEY="value") == meant


@pytest.mark.parametrize("written", [
    "${KEY-default}", "${KEY:?must be set}", "${KEY:=default}", "${KEY:+alt}", "${ KEY }",
    "${1KEY}", "${}", "${KEY", "sk-${KEY:-${OTHER}}",
])
def test_a_reference_the_proxy_does_not_read_is_a_problem_naming_the_key(written: str) -> None:
    problems = problems_of(BASE + f"    api_key: '{written}'\n", KEY="k", OTHER="o")
    assert len(problems) == 1, problems
    assert problems[0].startswith("upstreams.u.api_key: ")
    assert "is not a reference the proxy reads" in problems[0] and SUPPORTED in problems[0]


def test_the_problem_does_not_quote_a_secret_inside_the_reference() -> None:
    [problem] = problems_of(BASE + "    api_key: '${KEY-sk-abcdefghijklmnop1234567890}'\n")
    assert "abcdefghijklmnop1234567890" not in problem


def test_a_number_key_with_an_unread_reference_is_one_problem() -> None:
    assert problems_of(BASE + "server:\n  port: ${PORT-8080}\n") == [
        "server.port: '${PORT-8080}' is not a reference the proxy reads: " + SUPPORTED]


def test_check_config_exits_1_for_an_unread_reference(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text(BASE + "    api_key: ${OPENAI_API_KEY-sk-none}\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1
    assert "upstreams.u.api_key: '${OPENAI_API_KEY-sk-none}' is not a reference" in result.stderr


def test_what_check_config_prints_of_a_literal_reference_reads_back_the_same(
        tmp_path: Path) -> None:
    # Its output is itself a config: a literal `${` printed bare would be read as a reference.
    config = tmp_path / "proxy.yaml"
    config.write_text(BASE + "compaction:\n  manual_command: /compact-$${SCOPE}\n")
    printed = cli("check-config", "--config", str(config))
    assert printed.returncode == 0, printed.stderr
    saved = tmp_path / "resolved.yaml"
    saved.write_text(printed.stdout)
    again = cli("check-config", "--config", str(saved))
    assert again.returncode == 0, again.stderr
    assert again.stdout == printed.stdout
    assert settings_of(saved.read_text()).compaction.manual_command == "/compact-${SCOPE}"
