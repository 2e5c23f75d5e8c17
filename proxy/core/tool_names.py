"""Which configured tool a call names, and whether a multi-command tool's call only looks.

Tool names in `collapse.tools`, `restore.file_tools` and `restore.plan_tools` are globs
matched case-sensitively (`fnmatchcase`), as `microcompact.tools` is: agents spell the same
tool `read`, `Read` or `read_file`, and the defaults list each spelling.

Some agents read and edit files through one tool (OpenHands' and Anthropic's text editor
`str_replace_editor`: `command` is view, create, str_replace, insert or undo_edit). A call
whose `command` argument is one of the editing sub-commands never counts as a read or an
exploration step, and one whose `command` is `view` never counts as setting a plan (OpenHands'
`task_tracker` views the plan with it). Any other `command` value is left alone.

Shell tools (`collapse.shell_tools`, `restore.shell_tools`) are named apart: their `command` is
a command line, and a call only looks when that line only reads (`shell_calls`).
"""

from __future__ import annotations

from collections.abc import Collection
from fnmatch import fnmatchcase
from functools import lru_cache

import orjson

from proxy.conversation import ToolCall
from proxy.core.shell_calls import call_only_reads

EDIT_COMMANDS = frozenset({"create", "str_replace", "insert", "undo_edit"})
VIEW_COMMAND = "view"


def named(name: str, globs: Collection[str]) -> bool:
    if len(name) > _LONGEST_CACHED:  # no tool's: 4,096 such names could hold gigabytes
        return _matches(name, globs)
    return _named(name, globs if isinstance(globs, (tuple, frozenset)) else tuple(globs))


_LONGEST_CACHED = 256


@lru_cache(maxsize=4096)  # a thread asks it of every call, again on every request
def _named(name: str, globs: tuple[str, ...] | frozenset[str]) -> bool:
    return _matches(name, globs)


def _matches(name: str, globs: Collection[str]) -> bool:
    return any(name == g or fnmatchcase(name, g) for g in globs)


def sub_command(call: ToolCall) -> str | None:
    """The call's `command` argument when it is a string, else None."""
    if '"command"' not in call.arguments:
        return None  # most calls: no parse
    try:
        args = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return None
    command = args.get("command") if isinstance(args, dict) else None
    return command if isinstance(command, str) else None


def looks_only(call: ToolCall, globs: Collection[str]) -> bool:
    """The call names one of `globs` and is not an editing sub-command of it."""
    return named(call.name, globs) and sub_command(call) not in EDIT_COMMANDS


def sets_plan(call: ToolCall, globs: Collection[str]) -> bool:
    return named(call.name, globs) and sub_command(call) != VIEW_COMMAND


def shell_looks_only(call: ToolCall, shell_globs: Collection[str]) -> bool:
    """The call names a shell tool and its command line only reads."""
    return named(call.name, shell_globs) and call_only_reads(call)


def explores(call: ToolCall, globs: Collection[str], shell_globs: Collection[str]) -> bool:
    return looks_only(call, globs) or shell_looks_only(call, shell_globs)
