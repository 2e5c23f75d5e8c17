"""The shipped `config/proxy.yaml` is the reference of every key (the README sends readers to
it): each key that holds a value says what it means, on its line or in a comment right above."""

from __future__ import annotations

import re
from pathlib import Path

CONFIG = Path(__file__).resolve().parents[1] / "config" / "proxy.yaml"
_KEY = re.compile(r"^(\s*)([A-Za-z_][\w.]*):\s*(\S.*)?$")
# Self-explaining under a commented section, or entries of the commented `routes` / `models`.
_EXEMPT = {"enabled", "model", "upstream", "max_input_tokens"}


def keys_without_comment(lines: list[str]) -> list[str]:
    missing = []
    for number, line in enumerate(lines):
        match = _KEY.match(line)
        if not match or not match.group(3) or match.group(2) in _EXEMPT:
            continue  # a section (its keys follow), or a key exempted above
        commented_above = number > 0 and lines[number - 1].lstrip().startswith("#")
        if not commented_above and not any("#" in part for part in _value_lines(lines, number)):
            missing.append(f"line {number + 1}: {match.group(2)}")
    return missing


def _value_lines(lines: list[str], number: int) -> list[str]:
    """The key's line and those continuing its value (a list wrapped over several lines)."""
    end = number + 1
    while end < len(lines) and lines[end].strip() and not _KEY.match(lines[end]) \
            and not lines[end].lstrip().startswith("#"):
        end += 1
    return lines[number:end]


def test_every_key_of_the_shipped_config_says_what_it_means() -> None:
    assert keys_without_comment(CONFIG.read_text().splitlines()) == []


def test_a_key_without_a_comment_is_found() -> None:
    lines = ["compaction:", "  # the breaker", "  failures: 3", "  timeout_s: 120",
             "  tools: [a,", "         b]   # globs", "  shell: [a,", "         b]"]
    assert keys_without_comment(lines) == ["line 4: timeout_s", "line 7: shell"]
