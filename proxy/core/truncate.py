"""Truncate (SPEC §4.2): cut the long strings inside old, oversized tool-call arguments.

A call outside the protected window whose arguments exceed `max_arg_chars` keeps the first
`keep_chars` characters of each long string value, followed by a marker saying how many
characters were cut. The arguments are parsed and re-serialized, so they stay valid JSON with
every key, number and short string intact (paths above all). Free-form input (custom tools,
or arguments that were not JSON to begin with) is cut as text with the same marker.
A string is cut only when that saves more than the marker costs, so cutting twice = once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import orjson

from proxy.conversation import Api, Entry, Kind, replaced, with_call_arguments
from proxy.core.memo import memoized
from proxy.core.stage import StageContext, StageResult, replace_at, with_key
from proxy.settings import TruncateSettings

NAME = "truncate"
MARKER = "…[{n} chars cut by compaction-proxy]"
_MARKER_ROOM = 64  # longer than any rendered MARKER
_NOT_PARSED = object()
_INT64 = 2.0**63


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
    parsed = _NOT_PARSED if free_form else _loads(arguments)
    if parsed is _NOT_PARSED:
        return cut_text(arguments, keep)
    cut = _cut_strings(parsed, keep)
    if cut == parsed:
        return arguments
    return _dumps(cut)


def cut_text(text: str, keep: int) -> str:
    if len(text) <= keep + _MARKER_ROOM:
        return text
    return text[:keep] + MARKER.format(n=len(text) - keep)


def _cut_strings(value: Any, keep: int) -> Any:
    if isinstance(value, str):
        return cut_text(value, keep)
    if isinstance(value, list):
        return [_cut_strings(v, keep) for v in value]
    if isinstance(value, dict):
        return {k: _cut_strings(v, keep) for k, v in value.items()}
    return value


def _loads(text: str) -> Any:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        # orjson refuses valid JSON with a lone-surrogate escape ("\ud800"); cut as text it
        # would lose its closing quote. NaN and Infinity are not JSON: those stay text.
        try:
            return json.loads(text, parse_constant=_not_json)
        except ValueError:
            return _NOT_PARSED
    # orjson reads integers beyond 64 bits as floats; the standard parser keeps them exact.
    return json.loads(text) if _has_huge_float(value) else value


def _not_json(constant: str) -> Any:
    raise ValueError(f"{constant} is not JSON")


def _has_huge_float(value: Any) -> bool:
    if isinstance(value, float):
        return abs(value) >= _INT64
    if isinstance(value, list):
        return any(_has_huge_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_huge_float(v) for v in value.values())
    return False


def _dumps(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # integers beyond 64 bits, lone surrogates
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate goes back as the escape the client sent
            return json.dumps(value, separators=(",", ":"))
        return text
