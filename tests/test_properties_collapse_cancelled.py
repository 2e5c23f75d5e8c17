"""A cancelled result is never folded into a collapse record, as a property (SPEC §4.1, §5).

Collapse keeps each folded call's result status (ok/error, size), and repair must "never invent
a success" (SPEC §5). The cancelled result repair writes for an interrupted call
(`CANCELLED_TEXT`) comes back in the client's next request like any result; folded into a
record, it would read as a completed exploration step, `-> ok`: the call that never returned
becomes a success. So a step answered by that text is not a completed exploration step, and
collapse leaves it (its call and its result) as sent.

`test_properties_collapse.py` draws results that are ok or errors, never the cancelled text,
so a collapse that no longer told cancelled results apart (mutation M06 of the audit) passed
it. Here its conversations are reused with one to three exploration results replaced by the
cancelled text, as a client echoes it after an earlier repair.
"""

from __future__ import annotations

from typing import Any

from hypothesis import event, given
from hypothesis import strategies as st

from proxy.conversation import content_text
from proxy.core.repair import CANCELLED_TEXT
from tests.strategies import EXPLORATION
from tests.test_properties_collapse import _collapsed, exploring

Wire = dict[str, Any]


def _call_names(elements: list[Wire]) -> dict[str, str]:
    """Each call's name by its id (chat `tool_calls`, Responses call items)."""
    names: dict[str, str] = {}
    for element in elements:
        for call in element.get("tool_calls") or ():
            names[call["id"]] = call["function"]["name"]
        if element.get("type") == "function_call":
            names[element["call_id"]] = element["name"]
    return names


def _exploration_results(elements: list[Wire]) -> list[int]:
    """Indices of the results that answer an exploration call (a legacy `function` message
    names its call itself)."""
    names = _call_names(elements)
    found = []
    for i, element in enumerate(elements):
        if element.get("role") == "function":
            name = element.get("name")
        else:
            name = names.get(element.get("tool_call_id") or (
                element.get("call_id") if element.get("type") == "function_call_output" else None))
        if name in EXPLORATION:
            found.append(i)
    return found


def _cancelled(element: Wire) -> Wire:
    """The result as repair wrote it for an interrupted call, echoed back by the client."""
    field = "output" if element.get("type") == "function_call_output" else "content"
    return {**element, field: CANCELLED_TEXT}


@st.composite
def exploring_with_cancelled_results(draw: st.DrawFn) -> tuple[str, list[Wire], list[int]]:
    api, elements = draw(exploring())
    candidates = _exploration_results(elements)
    if not candidates:
        return api, elements, []
    chosen = draw(st.lists(st.sampled_from(candidates), min_size=1, max_size=3, unique=True),
                  "cancelled results")
    elements = [_cancelled(e) if i in chosen else e for i, e in enumerate(elements)]
    return api, elements, sorted(chosen)


@given(exploring_with_cancelled_results(), st.integers(0, 3))
def test_a_step_answered_by_the_cancelled_text_is_never_folded(drawn: tuple, keep: int) -> None:
    api, elements, cancelled = drawn
    if not cancelled:
        event("no exploration result to cancel")
        return
    entries, result = _collapsed(api, elements, keep)
    assert all(content_text(entries[i]) == CANCELLED_TEXT for i in cancelled)
    kept = {o for o in result.origins if o is not None}
    records = [content_text(e) for e, o in zip(result.entries, result.origins, strict=True) if o is None]
    event("collapsed" if records else "nothing collapsed")
    for i in cancelled:
        assert i in kept, f"the cancelled result at {i} was folded into a record: {records}"
    # Nor is its call folded away from it: the step stays whole, as sent.
    called = {entries[i].answers for i in cancelled} - {None}
    folded_calls = {c.id for k, e in enumerate(entries) if k not in kept for c in e.calls}
    assert not called & folded_calls, f"the calls {called & folded_calls} were folded, their results kept"
