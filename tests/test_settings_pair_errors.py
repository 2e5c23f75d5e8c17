"""A key refused for where it stands against another names both values, and an unknown time
zone says what to write: the user sees what to change without opening the file twice."""

from __future__ import annotations

import pytest
import yaml

from proxy.settings import ConfigError, parse_settings

BASE = "upstreams:\n  u:\n    base_url: http://127.0.0.1:9/v1\n"


def problems_of(text: str) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_settings(yaml.safe_load(BASE + text), {})
    return error.value.problems


@pytest.mark.parametrize(("text", "problem"), [
    ("compaction:\n  trigger_ratio: 0.5\n  keep_ratio: 0.6\n",
     "compaction.keep_ratio: must be smaller than trigger_ratio (0.5), got 0.6"),
    ("compaction:\n  truncate: {max_arg_chars: 1000, keep_chars: 1500}\n",
     "compaction.truncate.keep_chars: must be smaller than max_arg_chars (1000), got 1500"),
    ("compaction:\n  breaker: {base_cooldown_s: 60, max_cooldown_s: 10}\n",
     "compaction.breaker.max_cooldown_s: must be at least base_cooldown_s (60), got 10"),
    ("models:\n  m: {max_input_tokens: 9000, context_window: 8000}\n",
     "models.m.max_input_tokens: must not exceed context_window (8000), got 9000"),
    ("compaction:\n  timezone: Paris\n",
     "compaction.timezone: unknown time zone 'Paris' (an IANA name such as Europe/Paris, or "
     "null for the machine's)")])
def test_the_problem_names_what_to_write(text: str, problem: str) -> None:
    assert problems_of(text) == [problem]
