"""Truncated arguments stay valid JSON, in the legacy `function_call` form too (SPEC §4.2).

SPEC §4.2: "tool-call arguments longer than a limit have their long string values cut with a
marker that says how much was cut; arguments stay valid JSON." A client of the deprecated
functions API sends a call as the assistant message's `function_call: {name, arguments}`
(answered by a `role: "function"` message); its arguments are a call's all the same. So after
the truncate stage, and after the whole cascade, with a small argument limit, every
`function_call.arguments` and every `tool_calls[].function.arguments` that parsed as JSON
before still parses after.

The mutation this guards against: legacy arguments cut as free-form text (the first characters
and the marker, the JSON's closing quotes and braces lost), while `tool_calls` arguments are
cut string by string. The existing truncate properties call `cut_arguments` directly, or draw
lists whose legacy calls rarely sit outside the window with long arguments.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.cascade import run_cascade
from proxy.core.truncate import truncate
from proxy.settings import CompactionSettings, TruncateSettings
from tests.factories import entries_of, stage_context, wire
from tests.strategies import cascade_contexts, conversations
from tests.test_properties_truncate_marker import arguments as client_written_arguments


def _parses(text: Any) -> bool:
    if not isinstance(text, str):
        return False
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def _arguments(message: dict[str, Any]) -> list[tuple[str, Any]]:
    """Each function call's arguments in a chat message, by where they are: the legacy
    `function_call`, or a `tool_calls` entry by its id."""
    found: list[tuple[str, Any]] = []
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        found.append(("function_call", legacy.get("arguments")))
    for call in message.get("tool_calls") or []:
        if isinstance(call, dict) and isinstance(call.get("function"), dict):
            found.append((f"tool_calls {call.get('id')}", call["function"].get("arguments")))
    return found


@st.composite
def legacy_conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Chat conversations whose single calls are mostly in the legacy form, some of whose
    calls' arguments are JSON as clients write it (any spacing, escapes, number forms, a key
    written twice), long strings included."""
    elements = draw(conversations("chat", messy=draw(st.booleans()), legacy=draw(st.integers(0, 3)) > 0))
    out = []
    for message in elements:
        legacy = message.get("function_call")
        if isinstance(legacy, dict) and draw(st.booleans()):
            message = {**message, "function_call": {**legacy, "arguments": draw(client_written_arguments())}}
        elif message.get("tool_calls") and draw(st.booleans()):
            calls = [{**c, "function": {**c["function"], "arguments": draw(client_written_arguments())}}
                     if "function" in c else c for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


@given(legacy_conversations(), st.integers(0, 300), st.integers(0, 200), st.integers(0, 4))
def test_the_truncate_stage_keeps_legacy_and_tool_call_arguments_json(
        elements: list, max_arg_chars: int, keep_chars: int, tail: int) -> None:
    entries = entries_of("chat", elements)
    limits = TruncateSettings(max_arg_chars=max_arg_chars, keep_chars=keep_chars)
    settings = CompactionSettings(truncate=limits)
    out = truncate(entries, stage_context(entries, tail=min(tail, len(entries)), settings=settings))
    # Truncate replaces entries in place: the output's i-th entry is the client's i-th.
    assert len(out.entries) == len(elements)
    for i, (element, client) in enumerate(zip(wire(out.entries), elements, strict=True)):
        before = dict(_arguments(client))
        for where, text in _arguments(element):
            if _parses(before.get(where)):
                assert _parses(text), (i, where, text[-120:] if isinstance(text, str) else text)


@given(legacy_conversations(), st.data())
def test_the_cascade_keeps_legacy_and_tool_call_arguments_json(elements: list, data: st.DataObject) -> None:
    entries = entries_of("chat", elements)
    result = run_cascade(entries, data.draw(cascade_contexts(len(entries), compaction=True)))
    for element, origin in zip(wire(result.entries), result.origins, strict=True):
        if origin is None:
            continue  # a message the proxy made (a collapse record) had no client arguments
        before = dict(_arguments(elements[origin]))
        for where, text in _arguments(element):
            if _parses(before.get(where)):
                assert _parses(text), (origin, where, text[-120:] if isinstance(text, str) else text)
