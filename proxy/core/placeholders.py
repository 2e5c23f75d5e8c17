"""Reasoning placeholders: the retry for providers that demand `reasoning_content` back.

DeepSeek and Kimi thinking modes reject a current-loop assistant tool-call message without
`reasoning_content` (PROTOCOL.md §4.4). When the client did not keep it, the reasoning is gone;
an empty string is the documented way clients satisfy the check. Only chat messages after the
latest user message are touched, and only that one field is added.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.conversation import Api, Entries, Entry, Kind, latest_user_index, replaced


def with_reasoning_placeholders(entries: Sequence[Entry]) -> tuple[Entries, int]:
    """The entries with `reasoning_content: ""` where a current-loop call message lacks it."""
    latest = latest_user_index(entries)
    start = 0 if latest is None else latest + 1
    out = list(entries)
    added = 0
    for i in range(start, len(out)):
        entry = out[i]
        if (entry.api is Api.CHAT and entry.kind is Kind.ASSISTANT and entry.calls
                and not isinstance(entry.raw.get("reasoning_content"), str)):
            out[i] = replaced(entry, {**entry.raw, "reasoning_content": ""})
            added += 1
    return tuple(out), added
