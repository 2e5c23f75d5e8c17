"""The text of a collapse record: one line per exploration call, built only from the input.

Each line keeps the call's tool name, its short arguments exactly as called (path, pattern,
query, line range, flags, a shell call's command line or argv: every scalar argument up to
`_MAX_ARG` characters), the result's status (ok / error, or the exit code a shell tool's
output states) and size, and for search-like results the file locations they named.
Nothing here depends on time or on anything but the call and its result, so the same run
always gives the same bytes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import orjson

from proxy.conversation import Entry, ToolCall, content_text, has_non_text_parts
from proxy.core.shell_calls import call_file_read, outcome

HEADER = ("[compaction-proxy note, not written by the assistant: {n} earlier exploration "
          "call{s} collapsed to save context; their outputs were removed. Arguments are as called.]")
_MAX_ARG = 200
_MAX_LOCATIONS = 8
_FAILED = ("error", "err:", "exception", "traceback", "fatal", "failed", "no such file",
           "permission denied", "not found", "command not found", '{"error"')
_LOCATION = re.compile(r"^\s*((?:[\w.\-]+/)*[\w.\-]+\.\w+)(?::(\d+))?(?=[:\s]|$)")
_FILE_READS = ("read_file", "read")
_URL = re.compile(r"https?://[^\s)\]>\"']+")


def record_text(pairs: Sequence[tuple[ToolCall, Entry]]) -> str:
    lines = [HEADER.format(n=len(pairs), s="" if len(pairs) == 1 else "s")]
    lines += [describe(call, result) for call, result in pairs]
    return "\n".join(lines)


def describe(call: ToolCall, result: Entry) -> str:
    output = content_text(result)
    # A shell tool's wrapper says how its command ended; what it wraps is the command's output.
    wrapped = outcome(result, call)
    if wrapped is not None and wrapped[1] is not None:
        output = wrapped[1]
    failed = looks_failed(output) or (wrapped is not None and wrapped[0] != 0)
    status = "error" if failed else "ok"
    size = f"{output.count(chr(10)) + 1 if output else 0} lines, {len(output)} chars"
    if has_non_text_parts(result) and wrapped is None:
        size += ", with non-text parts"
    line = f"- {call.name} {short_arguments(call)} -> {status}, {size}"
    # A file's own text names no search hits; `Read` is `read` in Claude-Code-style agents,
    # `cat F` in a shell.
    reads_file = call.name.lower() in _FILE_READS or call_file_read(call) is not None
    found = locations(output) if not reads_file else ""
    return f"{line}; mentions {found}" if found else line


def short_arguments(call: ToolCall) -> str:
    try:
        parsed = orjson.loads(call.arguments) if call.arguments else {}
    except orjson.JSONDecodeError:
        return _cut(call.arguments)
    if not isinstance(parsed, dict):
        return _cut(call.arguments)
    kept = {k: _short(v) for k, v in parsed.items() if _is_short_scalar(v)}
    return orjson.dumps(kept).decode()


def _is_short_scalar(value: Any) -> bool:
    if isinstance(value, list):
        return len(value) <= 8 and all(_is_short_scalar(v) and not isinstance(v, list) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _short(value: Any) -> Any:
    if isinstance(value, str):
        return _cut(value)
    if isinstance(value, list):
        return [_short(v) for v in value]
    return value


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_ARG else text[:_MAX_ARG] + f"…(+{len(text) - _MAX_ARG} chars)"


def looks_failed(output: str) -> bool:
    head = output.lstrip()[:200].lower()
    return head.startswith(_FAILED) or "traceback (most recent call last)" in head


def locations(output: str) -> str:
    """The files (with line numbers) or URLs a search-like result named, deduplicated, capped."""
    found: dict[str, list[str]] = {}
    for line in output.splitlines():
        match = _LOCATION.match(line)
        if match:
            numbers = found.setdefault(match.group(1), [])
            if match.group(2) and match.group(2) not in numbers:
                numbers.append(match.group(2))
    for url in _URL.findall(output):
        found.setdefault(url, [])
    shown = [path + (":" + ",".join(nums) if nums else "") for path, nums in found.items()]
    extra = len(shown) - _MAX_LOCATIONS
    text = ", ".join(shown[:_MAX_LOCATIONS])
    return text + (f" (+{extra} more)" if extra > 0 else "")
