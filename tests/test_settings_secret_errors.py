"""A secret put under the wrong key: the problem names the key, never the secret's text.

The rule (`proxy/settings_reader.py`): a type error names a string's type and length only; a
key that takes text (a choice, a name, a URL) quotes its value through `shown`, which masks
what `redact` masks in logs and anything shaped like a key."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings
from tests.process import cli

KEYS = {"openai": "sk-proj-Abc123def456GHI789jkl012",
        "google": "AIzaSyD4f7Qx9Lm2Np8Rt5Vw1Yz3Bc6Ef0Gh", "hex": "3f9a8c7e6d5b4a3928170f1e2d3c4b5a"}
BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"
# One wrong place per kind of check: numbers, booleans, mappings, lists, choices, names, URLs.
WRONG_PLACES = {
    "server.port": "server:\n  port: ${KEY}\n",
    "upstreams.u.timeout_s": "upstreams:\n  u:\n    base_url: http://h/v1\n    timeout_s: ${KEY}\n",
    "upstreams.u.stream_usage": ("upstreams:\n  u:\n    base_url: http://h/v1\n"
                                 "    stream_usage: ${KEY}\n"),
    "upstreams.u.api": "upstreams:\n  u:\n    base_url: http://h/v1\n    api: ${KEY}\n",
    "upstreams.u.base_url": "upstreams:\n  u:\n    base_url: ${KEY}\n",
    "logging.level": "logging:\n  level: ${KEY}\n",
    "compaction.timezone": "compaction:\n  timezone: ${KEY}\n",
    "compaction.summarizer.upstream": "compaction:\n  summarizer:\n    upstream: ${KEY}\n",
    "routes[0].upstream": "routes:\n  - model: '*'\n    upstream: ${KEY}\n",
    "compaction.manual_command": "compaction:\n  manual_command: ' ${KEY}'\n",
}


def problems_of(text: str, key: str) -> list[str]:
    base = "" if text.startswith("upstreams:") else BASE
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(base + text), {"KEY": key})
    return error.value.problems


@pytest.mark.parametrize("where", sorted(WRONG_PLACES))
@pytest.mark.parametrize("kind", sorted(KEYS))
def test_a_key_under_the_wrong_key_is_named_but_not_echoed(where: str, kind: str) -> None:
    secret = KEYS[kind]
    problems = problems_of(WRONG_PLACES[where], secret)
    assert any(p.startswith(f"{where}: ") for p in problems), problems
    for problem in problems:
        assert secret not in problem and secret[6:18] not in problem, problem


def test_a_type_error_says_the_text_is_withheld_and_how_long_it_is() -> None:
    problems = problems_of("server:\n  port: ${KEY}\n", "hunter2")
    assert problems == ["server.port: expected an integer, got a string of 7 characters "
                        "(not shown: it may be a secret)"]


def test_text_that_cannot_be_a_key_is_still_quoted_to_help() -> None:
    problems = problems_of("logging:\n  level: verbose\ncompaction:\n  timezone: Mars/Base\n", "")
    assert "logging.level: must be one of debug, info, warning, error, got 'verbose'" in problems
    assert any(p.startswith("compaction.timezone: unknown time zone 'Mars/Base' (")
               for p in problems)


def test_an_unknown_key_that_is_a_pasted_secret_is_masked() -> None:
    problems = problems_of(f"server:\n  {KEYS['openai']}: 1\n", "")
    assert problems == ["server.sk-***: unknown key"]


def test_the_tokenizer_check_of_the_cli_does_not_echo_a_key(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(BASE + f"models:\n  gpt-4o:\n    tokenizer: {KEYS['hex']}\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 1 and "models.gpt-4o.tokenizer: unknown encoding" in result.stderr
    assert KEYS["hex"] not in result.stderr and KEYS["hex"] not in result.stdout


def test_check_config_masks_a_key_under_a_text_key_that_accepts_anything(
        tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text(BASE + "compaction:\n  summarizer:\n    model: ${KEY}\n"
                             "state:\n  path: ./state/${KEY}\n")
    root = str(Path(__file__).resolve().parents[1])
    result = subprocess.run([sys.executable, "-m", "proxy", "check-config", "--config",
                             str(config)], capture_output=True, text=True, timeout=60,
                            env={**os.environ, "PYTHONPATH": root, "KEY": KEYS["openai"]})
    assert result.returncode == 0, result.stderr
    assert KEYS["openai"][3:] not in result.stdout
    printed = yaml.safe_load(result.stdout)
    assert printed["compaction"]["summarizer"]["model"] == "sk-***"
    assert printed["state"]["path"] == "./state/sk-***"
