"""Reading the config file as YAML: every way the file itself can be wrong is a `ConfigError`
naming where, never quoting the line (it may hold a key)."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from proxy.settings_reader import ConfigError


def read_yaml(path: str | Path) -> Any:
    try:
        text = _read_text(path)
    except OSError as exc:
        raise ConfigError([f"<file>: cannot read {path}: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError as exc:
        where = f"byte {exc.object[exc.start]:#04x} at offset {exc.start}"
        raise ConfigError([f"<file>: {path} is not UTF-8 text: {where}"]) from None
    try:
        return yaml.load(text, Loader=_UniqueKeysLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError([f"<file>: {path} is not valid YAML: {_yaml_problem(exc)}"]) from None
    except RecursionError:
        raise ConfigError([f"<file>: {path} nests too deeply"]) from None
    except ValueError as exc:  # from PyYAML's converters: a date like 2024-13-45, a 5000-digit int
        raise ConfigError([f"<file>: {path} has a value YAML cannot read: {exc}"]) from None


def _read_text(path: str | Path) -> str:
    """The file's text, if it is a regular file. A FIFO (or a device) may never end: the read
    would block `check-config`, the start, or a reload (and with it the shutdown) for ever."""
    # Opened without waiting for a writer (a FIFO's open blocks until one comes), then checked
    # on the opened file itself: no other file can be swapped in between the check and the read.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with open(fd, encoding="utf-8") as file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError([f"<file>: {path} is not a regular file: the config is read "
                               "from a file (not a FIFO, socket or device)"])
        return file.read()


class _UniqueKeysLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a key given twice in one mapping is an error: PyYAML
    keeps the last silently, so a second `server:` section would drop the first one's keys.
    Keys that a merge (`<<: *base`) brings in may still be overridden."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[str] = set()
        for key, _ in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if key.value in seen:
                    raise yaml.MarkedYAMLError(problem=f"duplicate key {key.value!r}",
                                               problem_mark=key.start_mark)
                seen.add(key.value)
        return super().construct_mapping(node, deep)


# What a new user most often did to get PyYAML's problem, keyed by the problem's start.
_HINTS = (
    ("found character '\\t'", "YAML indents with spaces, not tabs: replace the tab"),
    ("expected <block end>", "check the indentation: the keys of one mapping line up"),
    ("mapping values are not allowed", "a key indented deeper than the one above it, "
                                       "or a value holding ': ' (quote it)"),
)


# PyYAML's problems that quote what follows a `!` or a `*`: a value that starts with one (a
# generated password may) is read as a tag or an alias, and its text would be in the line.
_QUOTING = (
    ("could not determine a constructor for the tag", "an unknown tag"),
    ("found undefined tag handle", "an undefined tag handle"),
    ("found undefined alias", "an undefined alias"),
)
_QUOTE_IT = "a value that starts with ! or * must be quoted"


def _yaml_problem(exc: yaml.YAMLError) -> str:
    # PyYAML's own text quotes the offending line, which may hold a key: where it is will do.
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None)
    named = next((text for start, text in _QUOTING if (problem or "").startswith(start)), None)
    if named is not None:
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        return f"{named}{where}: {_QUOTE_IT}"
    if mark is None or problem is None:
        return str(exc)
    where = f"{problem} (line {mark.line + 1}, column {mark.column + 1})"
    hint = next((text for start, text in _HINTS if problem.startswith(start)), None)
    return f"{where}: {hint}" if hint else where
