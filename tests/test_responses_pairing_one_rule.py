"""Repair's pairing and the sanitizer's shared-output answering read one statement of the
Responses rule (`responses_pairing.call_slots`): an output answers the step of the latest
call with its id before it.

Each of the two once walked the list with a copy of its own. The copies below are those walks
as they stood before the rule moved into one function (commit 48099f6), frozen here so the
move is proved to change nothing: on every drawn input, with `item_reference`s put in and with
any subset of the list kept, the shared rule gives what they gave. A deliberate change of the
rule (say, pairing by kind too) replaces this file's frozen copies with the new expectations.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, Kind
from proxy.core.kinds import CALL, RESULT
from proxy.core.repair import repair
from proxy.core.responses_pairing import _kept_outputs
from proxy.core.sanitize import Policy, sanitize
from proxy.core.shared_outputs import _lost_slots
from tests.factories import entries_of
from tests.strategies_calls import call_item, call_steps

Slot = tuple[int, str]
_REFERENCE = {"type": "item_reference", "id": "msg_stored"}


def _frozen_kept_outputs(entries: Entries) -> tuple[list[bool], set[int]]:
    """`responses_pairing._kept_outputs` at 48099f6."""
    seen: set[str] = set()
    open_calls: dict[str, list[int]] = {}
    answered: set[int] = set()
    kept_ids: set[str] = set()
    referenced = False
    keep = [True] * len(entries)
    step = 0
    for i, entry in enumerate(entries):
        if entry.kind is Kind.CALL and (i == 0 or entries[i - 1].kind is not Kind.CALL):
            step = i
        for call in entry.calls:
            seen.add(call.id)
            earlier = open_calls.get(call.id, ())
            open_calls[call.id] = [*earlier, i] if earlier and earlier[-1] >= step else [i]
        referenced = referenced or entry.raw.get("type") == "item_reference"
        if entry.kind is Kind.RESULT:
            answer: str = entry.answers  # type: ignore[assignment]
            keep[i] = answer in open_calls or (referenced and answer not in seen
                                               and answer not in kept_ids)
            if keep[i]:
                answered.update(open_calls.pop(answer, ()))
                kept_ids.add(answer)
    return keep, answered


def _frozen_lost_slots(before: Entries, kept: set[int]) -> tuple[set[Slot], set[Slot]]:
    """`shared_outputs._lost_slots` at 48099f6."""
    latest: dict[str, int] = {}
    lost: set[Slot] = set()
    answered: set[Slot] = set()
    start = 0
    for i, entry in enumerate(before):
        if entry.kind is CALL:
            if i == 0 or before[i - 1].kind is not CALL:
                start = i
            latest[entry.calls[0].id] = start
        elif entry.kind is RESULT and entry.answers in latest:
            slot = (latest[entry.answers], entry.answers)  # type: ignore[index]
            (answered if i in kept else lost).add(slot)  # type: ignore[arg-type]
    return lost, answered


@st.composite
def _inputs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A drawn input, some with item_references anywhere and outputs before their call."""
    elements, more = draw(call_steps())
    elements = [*elements, *more[:draw(st.integers(0, len(more)))]]
    for at in draw(st.lists(st.integers(0, len(elements)), max_size=2)):
        elements.insert(at, _REFERENCE)
    # Stray outputs under ids the list uses, or under one no call makes, anywhere: before
    # their call, twice, on both sides of an item_reference.
    for call_id in draw(st.lists(st.sampled_from(("call_0", "call_1", "call_zz")), max_size=3)):
        elements.insert(draw(st.integers(0, len(elements))),
                        {"type": "function_call_output", "call_id": call_id, "output": "stray"})
    if draw(st.booleans()):  # a call made only after outputs with its id
        kind = draw(st.sampled_from(("function_call", "shell_call", "local_shell_call")))
        elements.insert(draw(st.integers(0, len(elements))), call_item(kind, "call_zz", "late", 9))
    return elements


@given(_inputs())
def test_repair_keeps_the_outputs_and_answers_the_calls_it_did(elements: list[dict[str, Any]]) -> None:
    entries = entries_of("responses", elements)
    assert _kept_outputs(entries) == _frozen_kept_outputs(entries)


@given(_inputs(), st.data())
def test_the_sanitizer_finds_the_same_lost_and_answered_slots(elements: list[dict[str, Any]],
                                                              data: st.DataObject) -> None:
    raw = entries_of("responses", elements)
    for before in (raw, repair(raw).entries):
        some = data.draw(st.sets(st.integers(0, max(len(before) - 1, 0))))
        for policy in (Policy.PRIVATE_FREE, Policy.COMPACTED):
            kept = set(sanitize(before, policy).kept)
            assert _lost_slots(before, kept) == _frozen_lost_slots(before, kept)
        assert _lost_slots(before, some) == _frozen_lost_slots(before, some)
