"""Truncate (SPEC §4.2): cut the long strings inside old, oversized tool-call arguments.

A call outside the protected window whose arguments exceed `max_arg_chars` keeps the first
`keep_chars` characters of each long string value, followed by a marker saying how many
characters were cut. The arguments are parsed and re-serialized, so they stay valid JSON with
every key (a key written twice too, in its place), number and short string intact (paths above
all); `arguments_json` keeps that written form stable. Free-form input (custom tools,
or arguments that were not JSON to begin with) is cut as text with the same marker.
A string is cut only when that saves more than the marker costs, so cutting twice = once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from proxy.conversation import Api, Entry, Kind, replaced, with_call_arguments
from proxy.core.arguments_json import NOT_PARSED, Members, dumps, loads
from proxy.core.memo import memoized
from proxy.core.stage import StageContext, StageResult, replace_at, with_key
from proxy.settings import TruncateSettings

NAME = "truncate"
MARKER = "…[{n} chars cut by compaction-proxy]"
_MARKER_ROOM = 64  # longer than any rendered MARKER


def truncate(entries: Sequence[Entry], ctx: StageContext) -> StageResult:
    settings = ctx.settings.truncate
    key = ("truncate.cut", settings.max_arg_chars, settings.keep_chars)

    def cut_or_none(entry: Entry) -> Entry | None:
        """The cut entry (keyed, for the token counter); None when nothing was cut."""
        cut = truncated_calls(entry, settings)
        return None if cut is entry else with_key(cut)

    changes = {}
    for i in ctx.window.outside:
        entry = entries[i]
        if (entry.calls or _legacy_call(entry) is not None) and ctx.window.touchable(i):
            # An old call is cut on every request: parsing its long arguments once is enough.
            cut = memoized(entry, key, cut_or_none)
            if cut is not None:
                changes[i] = cut
    return replace_at(NAME, entries, ctx, changes)


def truncated_calls(entry: Entry, settings: TruncateSettings) -> Entry:
    for index, call in enumerate(entry.calls):
        if len(call.arguments) <= settings.max_arg_chars:
            continue
        arguments = cut_arguments(call.arguments, settings.keep_chars, free_form=call.custom)
        if arguments != call.arguments:
            entry = with_call_arguments(entry, index, arguments)
    legacy = _legacy_call(entry)
    if legacy is not None and len(legacy["arguments"]) > settings.max_arg_chars:
        arguments = cut_arguments(legacy["arguments"], settings.keep_chars)
        if arguments != legacy["arguments"]:
            entry = replaced(entry, {**entry.raw, "function_call": {**legacy, "arguments": arguments}})
    return entry


def _legacy_call(entry: Entry) -> dict[str, Any] | None:
    """The deprecated single `function_call` of a chat assistant message (answered by a
    `role: "function"` message): not among `calls`, but its arguments are a call's all the same."""
    if entry.api is not Api.CHAT or entry.kind is not Kind.ASSISTANT:
        return None
    call = entry.raw.get("function_call")
    return call if isinstance(call, dict) and isinstance(call.get("arguments"), str) else None


def cut_arguments(arguments: str, keep: int, *, free_form: bool = False) -> str:
    if free_form:
        return cut_text(arguments, keep)
    try:
        return _cut_json(arguments, keep)
    except RecursionError:
        # Nested deeper than Python walks from here: as sent it stays JSON, and the old call
        # must not fail every request of its thread.
        return arguments


def _cut_json(arguments: str, keep: int) -> str:
    parsed = loads(arguments)
    if parsed is NOT_PARSED:
        return cut_text(arguments, keep)
    cut = _cut_strings(parsed, keep)
    if cut == parsed:
        return arguments
    return dumps(cut)


def cut_text(text: str, keep: int) -> str:
    if len(text) <= keep + _MARKER_ROOM:
        return text
    return text[:keep] + MARKER.format(n=len(text) - keep)


def _cut_strings(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        return cut_text(value, keep)
    if isinstance(value, Members):  # a key written twice stays twice, keys never cut
        return Members((k, _cut_strings(v, keep)) for k, v in value)
    if isinstance(value, list):
        return [_cut_strings(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, keep) for k, v in value.items()}
    return value
