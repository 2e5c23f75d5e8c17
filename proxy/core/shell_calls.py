"""The command line of a shell tool call, and the exact output of a successful one.

Agents pass a command in their own shape: a string `command` (OpenHands `execute_bash`,
Claude-Code-style `Bash`, opencode `bash`, Gemini CLI `run_shell_command`, Cline
`execute_command`), an argv list `command` (Codex CLI `shell`, Responses `local_shell_call`'s
`action`), a string `cmd` (Codex `exec_command`), or a list of lines `commands` (Responses
`shell_call`'s `action`). Whether the line only reads is `shell_reads`' decision.

An output is taken only from a wrapper that states exit code 0 and is not cut: Codex's JSON
(`{"output": ..., "metadata": {"exit_code": 0}}`), its text header (`Exit code: 0`, `Wall time`,
`Output:`), its `exec_command` header (`Wall time`, `Process exited with code 0`, `Output:`)
when it came back before the call's yield deadline, mini-swe-agent's
`<returncode>0</returncode><output>...</output>` and OpenHands'
`[The command completed with exit code 0.]` trailer, and a Responses `shell_call_output` of one
command (`stdout` with an `exit` outcome, under its `max_output_length`). A bare output says
nothing of success (`cat: x: No such file or directory` is one too), so it is never taken as a
file's text; nor is one that bears any mark its agent leaves where it cut an output.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

import orjson

from proxy.conversation import Api, Entry, Kind, ToolCall, content_text
from proxy.core.shell_reads import (FileRead, argv_file_read, argv_only_reads, file_read,
                                    only_reads)

_DIRECTORY_KEYS = ("workdir", "working_directory", "cwd", "directory", "dir_path")
# Codex's shapes, from openai/codex codex-rs: `core/src/tools/mod.rs` (the JSON and the text form
# of `shell`; the text form writes `Total output lines` between its header lines only when the
# cut changed the line count), `core/src/tools/handlers/unified_exec.rs` and `tools/context.rs`
# (`exec_command`: optional `Chunk ID`, `Wall time`, `Process exited with code N` or
# `Process running with session ID N`, optional `Original token count`, then `Output:`).
_CODEX_HEADER = re.compile(r"\AExit code: (-?\d+)\nWall time: [^\n]*\n((?:[^\n]*\n)*?)Output:\n")
_EXEC_HEADER = re.compile(r"\A(?:Chunk ID: [^\n]*\n)?Wall time: ([^\n]*)\n((?:[^\n]*\n)*?)Output:\n")
_EXEC_EXITED = re.compile(r"Process exited with code (-?\d+)")
_EXEC_TOKENS = re.compile(r"Original token count: (\d+)")
_EXEC_WALL = re.compile(r"(\d{1,9}(?:\.\d{1,9})?) seconds")
# Unified exec collects output until the process's output closes after its exit, or until a
# deadline: `yield_time_ms` (10,000 by default for `exec_command`) clamped to 250..30,000 ms
# (`unified_exec/mod.rs`, `process_manager.rs`, `handlers/unified_exec.rs`). Only then does it
# ask whether the process exited: one that exited just after the deadline is reported as
# exited, with only the output collected before it. A wall time under the deadline is the one
# sign the output was read to its end; 250 ms, the floor, when the call's own is unknown. (A
# pause for an approval, or Windows' longer first wait, only moves the deadline later: a wall
# time under the one computed here is under the real one too.)
_EXEC_YIELD_MS = (10_000, 250, 30_000)  # default, least, most
# Where Codex cut an output: the middle cut of `utils/string/src/truncate.rs` (tokens or
# chars), the older line/byte cut of `core/src/truncate.rs`, the warning `formatted_truncate_text`
# (`utils/output-truncation`) puts first, and the note a timed-out command's output starts with.
_CODEX_CUT = re.compile(r"…\d+ (?:tokens|chars) truncated…"
                        r"|\[\.\.\. omitted \d+ of \d+ lines \.\.\.\]"
                        r"|\[\.\.\. output truncated to fit \d+ bytes \.\.\.\]"
                        r"|\AWarning: truncated output \(original token count: \d+\)"
                        r"|\Acommand timed out after \d+ milliseconds\n")
_MINI_SWE = re.compile(r"\A<returncode>(-?\d+)</returncode>\n<output>\n(.*)</output>\s*\Z", re.S)
_OPENHANDS_DONE = re.compile(
    r"\n?\[The command completed with exit code (-?\d+)\.\]((?:\n\[[^\n]*\])*)\s*\Z")
_OPENHANDS_OPENING = "[The command completed with exit code "
# OpenHands' marks of a cut output (All-Hands-AI/OpenHands: `events/observation/commands.py`,
# `runtime/utils/bash.py`, the memory's `truncate_content`; the agent SDK's `maybe_truncate`), and
# the prefix of a command's output read after a soft timeout, which shows only its rest.
_OPENHANDS_CUT = ("[Below is the output of the previous command.]", "Observation truncated",
                  "[... Command output truncated: removed ",
                  "[Previous command outputs are truncated. ", "<response clipped>")


def _arguments(call: ToolCall) -> dict[str, Any] | None:
    if call.custom or not call.arguments.lstrip().startswith("{"):
        return None
    try:
        args = orjson.loads(call.arguments)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(args, dict):
        return None
    # OpenHands types `command` into the running process when `is_input` is set (a bool, or
    # "true" in its older schema): no shell may be reading it.
    typed = args.get("is_input")
    return None if typed is True or (isinstance(typed, str) and typed.lower() == "true") else args


def _command(args: dict[str, Any]) -> str | list[str] | None:
    for key in ("command", "cmd"):
        value = args.get(key)
        if isinstance(value, str) or (isinstance(value, list) and value):
            return value
    lines = args.get("commands")
    if isinstance(lines, list) and len(lines) == 1:
        return lines[0] if isinstance(lines[0], str) else None
    return None


def call_only_reads(call: ToolCall) -> bool:
    args = _arguments(call)
    if args is None:
        return False
    lines = args.get("commands")
    if isinstance(lines, list) and "command" not in args and "cmd" not in args:
        return bool(lines) and all(isinstance(x, str) and only_reads(x) for x in lines)
    command = _command(args)
    if isinstance(command, str):
        return only_reads(command)
    return command is not None and argv_only_reads(command)


def call_file_read(call: ToolCall) -> FileRead | None:
    """The one file whose text the call's output is, with the path put under the call's own
    working directory when it names one. A relative directory is resolved as a relative
    operand is (Codex: against its session's directory; Gemini CLI: its project's root), so
    it stays part of the path; one whose place the text does not say (`~`, `$`) gives none."""
    args = _arguments(call)
    if args is None:
        return None
    command = _command(args)
    if command is None:
        return None
    found = file_read(command) if isinstance(command, str) else argv_file_read(command)
    if found is None or found.path.startswith("/"):
        return found
    for key in _DIRECTORY_KEYS:
        directory = args.get(key)
        if not isinstance(directory, str) or not directory.strip():
            continue
        if directory.startswith("~") or any(c in directory for c in "$`"):
            return None
        return FileRead(posixpath.normpath(posixpath.join(directory, found.path)),
                        found.whole, found.written)
    return found


def outcome(result: Entry, call: ToolCall | None = None) -> tuple[int, str | None] | None:
    """(exit code, the output or None when it was cut) that a shell call's result states;
    `call`, when given, is the call it answers (its yield deadline, for `exec_command`)."""
    if result.api is Api.RESPONSES and result.kind is Kind.RESULT \
            and result.raw.get("type") == "shell_call_output":
        return _shell_call_output(result.raw)
    return unwrapped(content_text(result), _exec_deadline_ms(call))


def _exec_deadline_ms(call: ToolCall | None) -> int:
    """The least time unified exec waited for output before it answered `call`."""
    default, least, most = _EXEC_YIELD_MS
    if call is None or call.name != "exec_command":
        return least
    args = _arguments(call)
    asked = default if args is None else args.get("yield_time_ms", default)
    if not isinstance(asked, int) or isinstance(asked, bool):
        return least
    return min(max(asked, least), most)


def _shell_call_output(raw: dict[str, Any]) -> tuple[int, str | None] | None:
    """One command's outcome: its stdout, cut when it reaches the item's `max_output_length`."""
    output = raw.get("output")
    if not isinstance(output, list) or len(output) != 1 or not isinstance(output[0], dict):
        return None
    stdout, stderr = output[0].get("stdout"), output[0].get("stderr", "")
    ended = output[0].get("outcome")
    if not isinstance(stdout, str) or not isinstance(stderr, str) or not isinstance(ended, dict):
        return None
    code = ended.get("exit_code")
    if ended.get("type") != "exit" or not isinstance(code, int) or isinstance(code, bool):
        return None
    cap = raw.get("max_output_length")
    cut = isinstance(cap, int) and len(stdout) + len(stderr) >= cap
    return code, None if cut else stdout


def unwrapped(text: str, exec_deadline_ms: int = _EXEC_YIELD_MS[1]) -> tuple[int, str | None] | None:
    """(exit code, the output or None when it was cut) of a known wrapper, else None;
    `exec_deadline_ms`: the yield deadline of the `exec_command` whose output it may be."""
    # A printed JSON file opens as Codex's JSON form does: when it is not that form, another
    # wrapper (OpenHands' trailer) may still hold it.
    if text.startswith("{") and (found := _codex_json(text)) is not None:
        return found
    if text.startswith("Exit code: "):
        match = _CODEX_HEADER.match(text)
        if match is None:
            return None
        # Codex writes `Total output lines` between the header lines only when it cut.
        cut = bool(match.group(2))
        return int(match.group(1)), None if cut else _uncut(text[match.end():])
    if text.startswith(("Chunk ID: ", "Wall time: ")):
        return _codex_exec(text, exec_deadline_ms)
    if text.startswith("<returncode>"):
        match = _MINI_SWE.match(text)
        if match is None:
            return None
        return int(match.group(1)), None if "<warning>" in text else match.group(2)
    # The last trailer is the command's: the output itself may end with a line like it.
    match = _OPENHANDS_DONE.match(text, max(0, text.rfind(_OPENHANDS_OPENING) - 1))
    if match is None:
        return None
    cut = any(m in text for m in _OPENHANDS_CUT)
    return int(match.group(1)), None if cut else text[:match.start()]


def _codex_json(text: str) -> tuple[int, str | None] | None:
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    output, metadata = parsed.get("output"), parsed.get("metadata")
    if not isinstance(output, str) or not isinstance(metadata, dict):
        return None
    code = metadata.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool):
        return None
    return code, _uncut(output)


def _uncut(output: str) -> str | None:
    return None if _CODEX_CUT.search(output) else output


def _codex_exec(text: str, deadline_ms: int) -> tuple[int, str | None] | None:
    """An `exec_command` (or `write_stdin`) output whose process exited; None while it runs."""
    match = _EXEC_HEADER.match(text)
    if match is None:
        return None
    code, tokens = None, None
    for line in match.group(2).split("\n")[:-1]:
        if (exited := _EXEC_EXITED.fullmatch(line)) is not None and code is None:
            code = int(exited.group(1))
        elif (counted := _EXEC_TOKENS.fullmatch(line)) is not None and tokens is None:
            tokens = int(counted.group(1))
        else:
            return None  # still running, or a line this reading does not know
    if code is None:
        return None
    wall = _EXEC_WALL.fullmatch(match.group(1))
    # Printed to 0.1 ms: a collection that ran to the deadline may show a hair under it.
    if wall is None or float(wall.group(1)) * 1000 >= deadline_ms - 1:
        return code, None
    output = _uncut(text[match.end():])
    # The count is of all the output collected (ceil(UTF-8 bytes / 4)), before any cut to fit
    # `max_output_tokens`: an output that does not add up to it lost some, marked or not.
    if output is not None and tokens is not None and (len(output.encode()) + 3) // 4 != tokens:
        output = None
    return code, output
