"""Placeholders: the retries for providers that demand private state back in the current loop.

DeepSeek and Kimi thinking modes reject an assistant tool-call message without
`reasoning_content` (PROTOCOL.md §4.4; DeepSeek's guide: in every later request, past turns'
too). When the client did not keep it, the reasoning is gone; an empty string is the documented
way clients satisfy the check, so it goes on every chat tool-call message that lacks one.
Gemini rejects a current-loop step whose first tool call lacks a `thought_signature` (§4.6);
its documented stand-in goes there, on chat messages after the latest user message only. Only
that one field is added.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from typing import Any

from proxy.conversation import Api, Entries, Entry, Kind, latest_user_index, replaced
from proxy.core.private import GEMINI_STAND_IN


def with_reasoning_placeholders(entries: Sequence[Entry]) -> tuple[Entries, int]:
    """The entries with `reasoning_content: ""` where a tool-call message lacks it."""
    return _edited(entries, 0, _with_reasoning_placeholder)


def with_signature_stand_ins(entries: Sequence[Entry]) -> tuple[Entries, int]:
    """The entries with Gemini's stand-in signature on the first tool call of each current-loop
    step that has none (parallel calls: only the first carries one)."""
    return _loop_edited(entries, _with_signature_stand_in)


def _loop_edited(entries: Sequence[Entry],
                 edit: Callable[[Entry], Entry | None]) -> tuple[Entries, int]:
    """The entries with `edit` applied after the latest user message; how many it changed."""
    latest = latest_user_index(entries)
    return _edited(entries, 0 if latest is None else latest + 1, edit)


def _edited(entries: Sequence[Entry], start: int,
            edit: Callable[[Entry], Entry | None]) -> tuple[Entries, int]:
    """The entries with `edit` applied from `start` on; how many it changed."""
    out = list(entries)
    added = 0
    for i in range(start, len(out)):
        edited = edit(out[i])
        if edited is not None:
            out[i] = edited
            added += 1
    return tuple(out), added


def _with_reasoning_placeholder(entry: Entry) -> Entry | None:
    if (entry.api is Api.CHAT and entry.kind is Kind.ASSISTANT and entry.calls
            and not isinstance(entry.raw.get("reasoning_content"), str)):
        return replaced(entry, {**entry.raw, "reasoning_content": ""})
    return None


def _with_signature_stand_in(entry: Entry) -> Entry | None:
    calls = entry.raw.get("tool_calls") if entry.api is Api.CHAT else None
    if (entry.kind is Kind.ASSISTANT and isinstance(calls, list) and calls
            and isinstance(calls[0], dict) and not _signed(calls[0])):
        return replaced(entry, {**entry.raw, "tool_calls": [_stood_in(calls[0]), *calls[1:]]})
    return None


def _signed(call: dict[str, Any]) -> bool:
    extra = call.get("extra_content")
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    return isinstance(signature, str) and bool(signature)


def _stood_in(call: dict[str, Any]) -> dict[str, Any]:
    # Other fields the client put under `extra_content` (and under `google`) stay.
    extra = call.get("extra_content")
    extra = extra if isinstance(extra, dict) else {}
    google = extra.get("google")
    google = google if isinstance(google, dict) else {}
    return {**call, "extra_content": {**extra, "google": {**google,
                                                           "thought_signature": GEMINI_STAND_IN}}}
