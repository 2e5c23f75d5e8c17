"""Projections the fake upstream (PROTOCOL.md §2) accepts, in the corners the strategies miss.

Each case is a list the fake accepts as the client sent it (or a damaged one repair must fix),
and the proxy's output must pass the same rules.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import content_text
from proxy.core.cascade import run_cascade
from proxy.core.repair import CANCELLED_TEXT, repair
from proxy.testing.rules import check_responses
from tests.factories import r_assistant, r_call, r_output, r_user, responses, wire
from tests.strategies import cascade_contexts, conversations


def test_a_responses_call_id_used_again_in_a_later_turn_keeps_both_answers() -> None:
    """Responses pairs by `call_id` (PROTOCOL.md §2.3): a server that numbers its calls per
    response (`call_0` every turn) sends valid lists; the later answer is not a duplicate."""
    items = [r_user("a"), r_call("read_file", "call_0", {"path": "a"}), r_output("call_0", "A"),
             r_assistant("ok"), r_user("b"), r_call("read_file", "call_0", {"path": "b"}),
             r_output("call_0", "B")]
    assert check_responses({"input": items}) is None
    entries = responses(*items)
    out = repair(entries)
    assert out.entries == entries and out.changed == 0
    assert check_responses({"input": wire(out.entries)}) is None


def test_a_reused_call_id_left_unanswered_gets_its_own_cancelled_result() -> None:
    items = [r_user("a"), r_call("read_file", "call_0"), r_output("call_0", "A"), r_user("b"),
             r_call("read_file", "call_0"), r_user("stop")]
    out = repair(responses(*items))
    body = wire(out.entries)
    assert check_responses({"input": body}) is None
    assert out.cancelled == 1 and out.dropped_results == 0
    assert content_text(out.entries[5]) == CANCELLED_TEXT and body[5]["call_id"] == "call_0"


def _numbered_per_turn(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The items with call ids `call_0`, `call_1`, ... counted afresh after each user message."""
    out, names, n = [], {}, 0
    for item in items:
        if item.get("role") == "user":
            names, n = {}, 0
        if isinstance(item.get("call_id"), str):
            if item["call_id"] not in names:
                names[item["call_id"]], n = f"call_{n}", n + 1
            item = {**item, "call_id": names[item["call_id"]]}
        out.append(item)
    return out


@given(conversations("responses"), st.data())
def test_call_ids_numbered_per_turn_pass_repair_and_the_cascade_untouched(
        items: list[dict[str, Any]], data: st.DataObject) -> None:
    items = _numbered_per_turn(items)
    assert check_responses({"input": items}) is None
    entries = responses(*items)
    assert repair(entries).entries is entries
    context = data.draw(cascade_contexts(len(items), compaction=True))
    body = wire(run_cascade(entries, replace(context, keep_loop=False)).entries)
    assert check_responses({"input": body}) is None

