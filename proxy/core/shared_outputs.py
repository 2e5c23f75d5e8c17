"""Calls the sanitizer left without an output: they shared it with a server item that went.

A `local_shell_call` goes with its reasoning item (its id is required, `reasoning_items`), and
the outputs answering it go too. Another call of its step under the same `call_id` (servers
number calls per response; clients slip) shared that output, and is left with none: upstream
refuses the list ("No tool output found for function call ..."). Repair answers such a call
when it drops the reasoning item itself; this answers it the same way after the sanitizer's
drop (SPEC §5): one cancelled output of the call's own kind per id, at the end of its step's
outputs, claiming no outcome.

The step is read from the sanitizer's input, where the outputs that went still end it. Without
its reasoning item, the next response's calls can follow the left call directly and would look
like its step: the output would move when they come, and the prompt cache with it.
"""

from __future__ import annotations

from collections.abc import Sequence

from proxy.conversation import Api, Entries, Entry
from proxy.core.kinds import CALL, RESULT
from proxy.core.reasoning_items import is_server_tool_item
from proxy.core.responses_pairing import ANSWERED_BY_CLIENT, Slot, call_slots, cancelled_output


def answer_left_calls(before: Entries, after: Entries, kept: Sequence[int]
                      ) -> tuple[Entries, tuple[int | None, ...], int]:
    """`after` (what was `kept` of the valid list `before`) with a cancelled output for each
    step whose output for an id went while a call of it with that id stayed; per entry, its
    index in `before` (None when made here); how many were made."""
    if not before or before[0].api is not Api.RESPONSES:
        return after, tuple(kept), 0
    made = _made_outputs(before, set(kept))
    if not made:
        return after, tuple(kept), 0
    out: list[Entry] = []
    origins: list[int | None] = []
    places = sorted(made)
    k = 0
    for entry, origin in zip(after, kept, strict=True):
        while k < len(places) and places[k] <= origin:
            out += made[places[k]]
            origins += [None] * len(made[places[k]])
            k += 1
        out.append(entry)
        origins.append(origin)
    for place in places[k:]:
        out += made[place]
        origins += [None] * len(made[place])
    return tuple(out), tuple(origins), sum(map(len, made.values()))


def _made_outputs(before: Entries, kept: set[int]) -> dict[int, list[Entry]]:
    """Per index of `before` to put them in front of (the end of their step's outputs), the
    cancelled outputs to make."""
    lost, answered = _lost_slots(before, kept)
    made: dict[int, list[Entry]] = {}
    for start, call_id in sorted(lost - answered):
        left = _left_call(before, kept, start, call_id)
        if left is not None:
            made.setdefault(_group_end(before, start), []).append(cancelled_output(before[left]))
    return made


def _lost_slots(before: Entries, kept: set[int]) -> tuple[set[Slot], set[Slot]]:
    """The slots an output that went answered, and those a kept output answers
    (`responses_pairing.call_slots`)."""
    lost: set[Slot] = set()
    answered: set[Slot] = set()
    for i, slot in call_slots(before)[1].items():
        if slot is not None:
            (answered if i in kept else lost).add(slot)
    return lost, answered


def _left_call(before: Entries, kept: set[int], start: int, call_id: str) -> int | None:
    """The first kept call of the step at `start` with `call_id` that the client answers."""
    for j in range(start, len(before)):
        entry = before[j]
        if entry.kind is not CALL:
            return None
        if j in kept and entry.calls[0].id == call_id and entry.raw.get("type") in ANSWERED_BY_CLIENT:
            return j
    return None


def _group_end(before: Entries, start: int) -> int:
    """Past the step's run of calls, the server items right after it and the run of outputs
    after those: where repair ends the step (`responses_pairing.pair_responses`)."""
    j = start
    while j < len(before) and before[j].kind is CALL:
        j += 1
    while j < len(before) and is_server_tool_item(before[j]):
        j += 1
    while j < len(before) and before[j].kind is RESULT:
        j += 1
    return j
