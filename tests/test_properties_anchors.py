"""Usage anchors as properties (SPEC §6): an anchor serves only the projection it answered.

For a drawn projection and the response to it: the same projection with the echo and any
appended messages uses the anchor; any edit of an entry before the anchor's position, other
tools, or a compaction that replaced part of the prefix (the list keeping its length, so the
echo still sits at the anchor's position) gets no anchor.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import context_bytes, estimate, make_anchor, response_entries
from proxy.conversation import Api, Entries
from proxy.identity import Identities
from proxy.usage import normalize
from tests.factories import entries_of
from tests.strategies import conversations

IDS = Identities()
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
USAGE = {"prompt_tokens": 40_000, "completion_tokens": 150}
RESPONSE = {"role": "assistant", "content": "Reading it now.",
            "tool_calls": [{"id": "call_next", "type": "function",
                            "function": {"name": "read_file", "arguments": "{\"path\":\"a.py\"}"}}]}
AFTER = [{"role": "tool", "tool_call_id": "call_next", "content": "print('a')"},
         {"role": "user", "content": "and now?"}]
SUMMARY = {"role": "user", "content": "[context compaction] Summary of the earlier conversation."}


def _estimate(elements: list[dict[str, Any]], context: bytes, anchor: Any) -> Any:
    entries = entries_of("chat", elements)
    sizes = [len(e.to_bytes()) // 4 + 3 for e in entries]
    return estimate(entries, sizes, context, [anchor], 100, IDS.digest).anchor


def _anchor(projection: list[dict[str, Any]], context: bytes) -> Any:
    usage = normalize(USAGE, Api.CHAT)
    assert usage is not None
    return make_anchor(entries_of("chat", projection), context, response_entries(Api.CHAT, RESPONSE),
                       usage, IDS.digest)


def _edited(element: dict[str, Any], how: int) -> dict[str, Any]:
    if how == 0:
        return {**element, "content": f"{element.get('content')!s} (edited)"}
    if how == 1:
        return {**element, "name": "someone"}
    return {k: v for k, v in element.items() if k != "content"} | {"content": None}


projections = conversations("chat", max_turns=3).filter(bool)


@given(projections, st.integers(0, 2))
def test_pure_appends_use_the_anchor(projection: list, appended: int) -> None:
    context = context_bytes(TOOLS, None, "gpt-4o")
    anchor = _anchor(projection, context)
    assert _estimate([*projection, RESPONSE, *AFTER[:appended]], context, anchor) == anchor


@given(projections, st.data())
def test_an_edit_before_the_anchor_rejects_it(projection: list, data: st.DataObject) -> None:
    context = context_bytes(TOOLS, None, "gpt-4o")
    anchor = _anchor(projection, context)
    k = data.draw(st.integers(0, len(projection) - 1))
    edited = _edited(projection[k], data.draw(st.integers(0, 2)))
    if entries_of("chat", [edited])[0].to_bytes() == entries_of("chat", [projection[k]])[0].to_bytes():
        return
    changed = [*projection[:k], edited, *projection[k + 1:]]
    assert _estimate([*changed, RESPONSE, *AFTER], context, anchor) is None


@given(projections, st.sampled_from(("tools", "model", "instructions")))
def test_other_tools_model_or_instructions_reject_it(projection: list, what: str) -> None:
    anchor = _anchor(projection, context_bytes(TOOLS, None, "gpt-4o"))
    other = {"tools": context_bytes([*TOOLS, {"type": "function", "function": {"name": "grep"}}], None, "gpt-4o"),
             "model": context_bytes(TOOLS, None, "gpt-4.1"),
             "instructions": context_bytes(TOOLS, "Be brief.", "gpt-4o")}[what]
    assert _estimate([*projection, RESPONSE], other, anchor) is None


@given(projections, st.data())
def test_a_compaction_of_the_prefix_rejects_it(projection: list, data: st.DataObject) -> None:
    """Summary and restored messages in place of a prefix, as many entries as they replaced."""
    context = context_bytes(TOOLS, None, "gpt-4o")
    anchor = _anchor(projection, context)
    cut = data.draw(st.integers(1, len(projection)))
    made = [SUMMARY] + [{"role": "user", "content": f"restored {i}"} for i in range(cut - 1)]
    compacted = [*made, *projection[cut:]]
    if _same(compacted, projection):
        return
    assert _estimate([*compacted, RESPONSE], context, anchor) is None


def _same(a: list, b: list) -> bool:
    ea: Entries = entries_of("chat", a)
    eb: Entries = entries_of("chat", b)
    return [e.to_bytes() for e in ea] == [e.to_bytes() for e in eb]
