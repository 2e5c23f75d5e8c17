"""Safe cuts against the rules read from the list alone (SPEC §5, `proxy.core.boundary`).

The cutoff, the protected window and every stage move their cuts with `safe_cuts` and its two
walks, so they are checked here on damaged lists too: results with no call before them, results
moved away from their call, duplicates, reasoning items left dangling, legacy `function_call`
pairs, and (Responses) server calls such as `web_search_call` that a reasoning item produced. A
valid list alone never shows the rule "the kept part never starts with a tool result": there
every result sits right after its call, and the open-call rule already forbids that cut (a
legacy result excepted: the form has no ids, so that rule alone keeps it with its call).
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, Entry, Kind, latest_user_index, leading_instructions
from proxy.core.boundary import (cut_at_or_after, cut_at_or_before, is_summary_cut,
                                 nearest_safe_cut, safe_cuts, summary_cuts)
from proxy.core.reasoning_items import is_produced
from proxy.core.window import window_of
from tests.factories import entries_of
from tests.strategies import PRODUCED_ID_PREFIXES, Wire, conversations, interrupted

_WEB_SEARCH = {"type": "web_search_call", "id": "ws_1", "status": "completed",
               "action": {"type": "search", "query": "修复 the test"}}


@st.composite
def _with_server_calls(draw: st.DrawFn, elements: list[Wire]) -> list[Wire]:
    """Some reasoning items followed by a server call they produced (no `call_id`: no result),
    some items with an id echoed by an `item_reference` instead (a store-on client), and
    computer calls answered by a screenshot, or not, put in anywhere."""
    out: list[Wire] = []
    for element in elements:
        if (element.get("type") in ("reasoning", "function_call", "custom_tool_call", "message")
                and isinstance(element.get("id"), str) and draw(st.integers(0, 3)) == 0):
            element = {"type": "item_reference", "id": element["id"]}
        out.append(element)
        if element.get("type") == "reasoning" and draw(st.integers(0, 2)) == 0:
            out.append(_WEB_SEARCH)
    for n in range(draw(st.integers(0, 2))):
        call = {"type": "computer_call", "id": f"cu_{n}", "call_id": f"call_computer{n}",
                "action": {"type": "screenshot"}, "pending_safety_checks": [], "status": "completed"}
        answer = [] if draw(st.booleans()) else [{"type": "computer_call_output", "call_id": f"call_computer{n}",
                                                   "output": {"type": "computer_screenshot", "image_url": "x"}}]
        at = draw(st.integers(0, len(out)))
        out[at:at] = [call, *answer]
    return out


damaged = st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api),
    (conversations(api, messy=True) | interrupted(api) | conversations(api)).flatmap(
        _with_server_calls if api == "responses" else st.just)))


def _step_item(entry: Entry) -> bool:
    """An item of a step's consecutive run: one a reasoning item produced, or an
    `item_reference` (it may stand for the step's reasoning item)."""
    return is_produced(entry) or entry.raw.get("type") == "item_reference"


def _expected_safe(entries: Entries) -> list[bool]:
    """`safe[b]` by the five rules, walked naively over every cut."""
    n = len(entries)
    safe = [True] * (n + 1)
    for b in range(n + 1):
        if b < n and (entries[b].kind is Kind.RESULT or entries[b].raw.get("role") == "function"):
            safe[b] = False  # the kept part would start with a result (a legacy one too)
        if b > 0 and entries[b - 1].kind is Kind.REASONING:
            safe[b] = False  # a reasoning item would lose what it produced
        if 0 < b < n and _step_item(entries[b - 1]) and _step_item(entries[b]):
            safe[b] = False  # one Responses step's items stay on one side
        a = b - 1
        while a >= 0 and entries[a].kind is Kind.RESULT:
            a -= 1
        if a < b - 1 and a >= 0 and entries[a].kind is Kind.REASONING:
            safe[b] = False  # outputs astray after a reasoning item do not part it from its item
    for j, result in enumerate(entries):
        if result.kind is not Kind.RESULT:
            continue
        made = [i for i in range(j) if any(c.id == result.answers for c in entries[i].calls)]
        if made:
            for b in range(made[-1] + 1, j + 1):
                safe[b] = False  # the latest call with its id before it, answered after the cut
    return safe


@given(damaged)
def test_safe_cuts_are_exactly_the_cuts_that_split_nothing_paired(drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    assert safe_cuts(entries) == _expected_safe(entries)


def _expected_summary_safe(entries: Entries) -> list[bool]:
    """`_expected_safe`, and no cut before an item a step produced (a reference may begin the
    next step, unless its id is that of an item a step makes) when walking back over
    outputs and step items meets an output and then a reasoning item, or a reference on the
    way."""
    safe = _expected_safe(entries)
    for b in range(len(entries)):
        named = entries[b].raw.get("id") if entries[b].raw.get("type") == "item_reference" else None
        if not (is_produced(entries[b]) or str(named).startswith(PRODUCED_ID_PREFIXES)):
            continue
        a = b - 1
        while a >= 0 and (entries[a].kind is Kind.RESULT or _step_item(entries[a])):
            a -= 1
        run = entries[a + 1:b]
        began = (a >= 0 and entries[a].kind is Kind.REASONING) or any(
            e.raw.get("type") == "item_reference" for e in run)
        if began and any(e.kind is Kind.RESULT for e in run):
            safe[b] = False
    return safe


@given(damaged)
def test_summary_cuts_are_the_safe_cuts_that_part_no_step_across_outputs(
        drawn: tuple[str, list]) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    expected = _expected_summary_safe(entries)
    assert summary_cuts(entries) == expected
    assert [is_summary_cut(entries, b) for b in range(len(entries) + 1)] == expected


@given(damaged, st.data())
def test_the_walks_find_the_nearest_safe_cut_on_their_side(drawn: tuple[str, list],
                                                            data: st.DataObject) -> None:
    api, elements = drawn
    entries = entries_of(api, elements)
    safe = safe_cuts(entries)
    n = len(entries)
    index = data.draw(st.integers(0, n), "index")
    floor = data.draw(st.integers(0, index), "floor")
    before = cut_at_or_before(safe, index, floor)
    cuts_before = [b for b in range(floor, index + 1) if safe[b]]
    assert before == (cuts_before[-1] if cuts_before else None)
    after = cut_at_or_after(safe, index)
    cuts_after = [b for b in range(index, n + 1) if safe[b]]
    assert after == (cuts_after[0] if cuts_after else None)
    lead = leading_instructions(entries)
    nearest = nearest_safe_cut(entries, index, safe)
    earlier = [b for b in range(lead + 1, index + 1) if safe[b]]
    later = [b for b in range(max(index, lead + 1), n + 1) if safe[b]]
    assert nearest == (earlier[-1] if earlier else later[0] if later else lead)


@given(damaged, st.data())
def test_a_stage_may_touch_only_what_lies_between_the_lead_and_the_window(
        drawn: tuple[str, list], data: st.DataObject) -> None:
    """The leading instructions, the latest user message and the protected tail are never
    touchable, whichever way a stage asks (SPEC §5). No stage today acts on a user message:
    without this, the window's own guard for it could go and no other test would notice."""
    api, elements = drawn
    entries = entries_of(api, elements)
    window = window_of(entries, data.draw(st.integers(0, len(entries)), "tail"))
    lead, latest = leading_instructions(entries), latest_user_index(entries)
    allowed = [i for i in range(lead, window.start) if i != latest]
    assert [i for i in range(len(entries)) if window.touchable(i)] == allowed
    assert window.touchable_among(range(len(entries))) == allowed
