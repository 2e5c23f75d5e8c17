"""The sanitizer never touches what a message says (SPEC §7: "Visible text, tool calls and tool
results are never touched by the sanitizer"), under every policy, for damaged conversations of
both APIs in every client shape (`tests.strategies_more`).

What may go is written here from SPEC §7 and PROTOCOL.md §4 alone: in chat, the private fields
(`reasoning_content`, `reasoning`, `reasoning_details`, `thinking_blocks`, `reasoning_items`,
LiteLLM's `provider_specific_fields`), thinking parts of `content` and Gemini signatures (a
stand-in may take a signature's place); in Responses, reasoning and `compaction` items whole,
and the server `id` of an item that followed a dropped reasoning item; going upstream, also a
server tool's item (a web search, ...) whose required id names a dropped reasoning item.
Everything else of every entry (text, parts, calls, results, unknown fields) is the client's,
in the client's order.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.core.private import GEMINI_STAND_IN
from proxy.core.sanitize import Policy, sanitize
from tests.factories import entries_of, without_gemini_signature
from tests.strategies import is_server_item
from tests.strategies_more import richer

PRIVATE_KEYS = {"reasoning_content", "reasoning", "reasoning_details", "thinking_blocks",
                "reasoning_items", "provider_specific_fields"}
THINKING = ("thinking", "redacted_thinking")
WHOLE_ITEMS = ("reasoning", "compaction")

cases = st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), richer(api, messy=True), st.sampled_from(list(Policy)),
    st.none() | st.integers(0, 40), st.booleans()))


def _only_thinking(content: Any) -> bool:
    return isinstance(content, list) and bool(content) and all(
        isinstance(p, dict) and p.get("type") in THINKING for p in content)


def _said(message: dict[str, Any], emptied: bool) -> dict[str, Any]:
    """What a chat message says: everything but its private state. `emptied`: its content
    held only thinking parts, so it says nothing there, however the empty content is written."""
    out = without_gemini_signature({k: v for k, v in message.items() if k not in PRIVATE_KEYS})
    content = out.get("content")
    if emptied:
        assert content in (None, "", []) or _only_thinking(content), content
        out.pop("content", None)
    elif isinstance(content, list):
        out["content"] = [p for p in content if not (isinstance(p, dict) and p.get("type") in THINKING)]
    if isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [without_gemini_signature(c) for c in out["tool_calls"]]
    return out


def _signatures(message: dict[str, Any]) -> list[Any]:
    holders = [message, *(c for c in message.get("tool_calls") or [] if isinstance(c, dict))]
    return [((h.get("extra_content") or {}).get("google") or {}).get("thought_signature") for h in holders]


@given(cases)
def test_the_sanitizer_changes_nothing_a_message_says(case: tuple) -> None:
    api, elements, policy, changed_at, upstream = case
    entries = entries_of(api, elements)
    out = sanitize(entries, policy, changed_at=changed_at, upstream=upstream)
    assert list(out.kept) == sorted(set(out.kept)), "the client's order"
    assert len(out.kept) == len(out.entries)
    for entry, origin in zip(out.entries, out.kept, strict=True):
        client = entries[origin].raw
        if api == "chat":
            emptied = _only_thinking(client.get("content"))
            assert _said(entry.raw, emptied) == _said(client, emptied), (origin, client)
            for new, old in zip(_signatures(entry.raw), _signatures(client), strict=True):
                assert new in (old, None, GEMINI_STAND_IN)
        else:
            assert {k: v for k, v in entry.raw.items() if k != "id"} == \
                   {k: v for k, v in client.items() if k != "id"}, (origin, client)
    gone = [entries[i].raw for i in range(len(entries)) if i not in set(out.kept)]
    if api == "chat":
        assert not gone, "a chat message was dropped"
    else:
        assert all(g.get("type") in WHOLE_ITEMS or (upstream and is_server_item(g))
                   for g in gone), gone
