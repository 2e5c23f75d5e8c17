"""Responses repair's pairing (SPEC §5): which outputs answer a call, and the cancelled
outputs and computer-call notes for the calls none answers, each at the end of its step (its
calls, the server tools' items right after them, then their outputs).

An output answers the step (the run of parallel call items) of the latest call with its id
before it, once; parallel calls that share an id share it. `call_slots` states that rule, for
repair here and for the sanitizer's answers (`shared_outputs`). `repair` drops what is left of
the reasoning items and counts.
"""

from __future__ import annotations

from proxy.conversation import (Api, Entries, Entry, Kind, make_assistant, make_result,
                                reference_id)
from proxy.core.computer_calls import interrupted_computer_note
from proxy.core.kinds import CALL, RESULT
from proxy.core.reasoning_items import is_server_tool_item

CANCELLED_TEXT = ("[Tool call cancelled: the call was interrupted before it returned a result. "
                  "No output was recorded for it.]")
# Responses call types the client answers with an output item, and repair can answer for it;
# others run on the server. A `computer_call` is the client's too, but its output must be a
# screenshot: nothing repair could make, so an unanswered one goes (`SCREENSHOT_CALL`).
ANSWERED_BY_CLIENT = ("function_call", "custom_tool_call", "local_shell_call", "shell_call",
                      "apply_patch_call")
SCREENSHOT_CALL = "computer_call"
Slot = tuple[int, str]  # (where a step, a run of call items, begins; a call id)


def cancelled_output(call: Entry) -> Entry:
    """The output repair makes for a Responses call item none answers: cancelled, in the
    call's own output kind, claiming no outcome."""
    return make_result(Api.RESPONSES, call.calls[0], CANCELLED_TEXT, call.raw.get("type"))


def call_slots(entries: Entries) -> tuple[dict[int, Slot], dict[int, Slot | None]]:
    """The one statement of the pairing rule: per call item (by index, in order), its slot; per
    output, the slot it answers, that of the latest call with its id before it (None: no call
    before it made the id). Whether an output is the first for its slot, or one behind an
    `item_reference`, is the reader's to decide."""
    calls: dict[int, Slot] = {}
    outputs: dict[int, Slot | None] = {}
    latest: dict[str, int] = {}  # per call id, where the step of its latest call begins
    step = 0
    previous: Kind | None = None
    for i, entry in enumerate(entries):
        kind = entry.kind
        if kind is CALL:
            if previous is not CALL:
                step = i
            call_id = entry.calls[0].id  # a Responses call item carries one call
            latest[call_id] = step
            calls[i] = (step, call_id)
        elif kind is RESULT:
            answer: str = entry.answers  # type: ignore[assignment]
            start = latest.get(answer)
            outputs[i] = None if start is None else (start, answer)
        previous = kind
    return calls, outputs


def _kept_outputs(entries: Entries) -> tuple[list[bool], set[int]]:
    """Which outputs answer a slot still open before them (`call_slots`), and which calls a
    kept output answers. A call in a later step opens its id again: a server that numbers its
    calls per response (`call_0` in every turn) sends valid lists, where the later output is no
    duplicate, and answers that step's call only; parallel calls of one step that share an id
    (a client's slip) share the output. An output no call before it made stays after an
    `item_reference` (its call may be stored upstream), once per id."""
    calls, outputs = call_slots(entries)
    referenced_from = next((i for i, e in enumerate(entries)
                            if reference_id(e) is not None), len(entries))
    keep = [True] * len(entries)
    answered: set[Slot] = set()
    unseen_kept: set[str] = set()  # ids of outputs kept behind an item_reference
    for i, slot in outputs.items():
        if slot is not None:
            keep[i] = slot not in answered
            answered.add(slot)
        else:
            answer: str = entries[i].answers  # type: ignore[assignment]
            keep[i] = i > referenced_from and answer not in unseen_kept
            if keep[i]:
                unseen_kept.add(answer)
    return keep, {i for i, slot in calls.items() if slot in answered}


def pair_responses(entries: Entries) -> tuple[list[Entry], list[int | None], int, int, list[int]]:
    """The entries with outputs paired, and (the last list) where in them a note stands for
    an unanswered computer call: at the end of its step, where a cancelled output would go,
    so the reasoning item before the step stays followed by any other item of it."""
    keep, answered = _kept_outputs(entries)
    screens = _unanswered_screens(entries, answered)
    out: list[Entry] = []
    origins: list[int | None] = []
    replaced: list[int] = []
    cancelled = 0
    group: list[int] = []  # the call items of the current step, open until its outputs end
    previous: Kind | None = None
    after_calls = False  # the entry before is one of the step's calls or server items
    for i, entry in enumerate(entries):
        kind = entry.kind
        # Server tools' items right after a step's calls (a search its response ran after
        # handing the client a call) belong to the step: what repair puts at its end must not
        # part them from the reasoning item their ids name. They open no step of their own.
        server = after_calls and is_server_tool_item(entry)
        extends = kind is RESULT or server or (kind is CALL and previous is CALL)
        if not extends:
            cancelled += _close_group(entries, group, answered, out, origins)
            replaced += _note_screens(entries, group, screens, out, origins)
            group.clear()
        if kind is CALL:
            group.append(i)
        if keep[i] and i not in screens:
            out.append(entry)
            origins.append(i)
        previous = kind
        after_calls = kind is CALL or server
    cancelled += _close_group(entries, group, answered, out, origins)
    replaced += _note_screens(entries, group, screens, out, origins)
    return out, origins, cancelled, keep.count(False), replaced


def _unanswered_screens(entries: Entries, answered: set[int]) -> set[int]:
    """The computer calls no kept output follows. One an `item_reference` comes after stays:
    the stored screenshot it names may answer it, unseen here."""
    last_reference = max((i for i, e in enumerate(entries)
                          if reference_id(e) is not None), default=-1)
    return {i for i, e in enumerate(entries)
            if e.kind is Kind.CALL and e.raw.get("type") == SCREENSHOT_CALL
            and i not in answered and last_reference < i}


def _note_screens(entries: Entries, group: list[int], screens: set[int], out: list[Entry],
                  origins: list[int | None]) -> list[int]:
    """A note for each of the group's unanswered computer calls; where they went."""
    at = []
    for i in group:
        if i in screens:
            at.append(len(out))
            out.append(make_assistant(Api.RESPONSES, interrupted_computer_note(entries[i].raw)))
            origins.append(None)
    return at


def _close_group(entries: Entries, group: list[int], answered: set[int],
                 out: list[Entry], origins: list[int | None]) -> int:
    """Cancelled results for the group's client calls no kept output answers (one per id:
    an output answers every call of the step with its id)."""
    made: set[str] = set()
    for i in group:
        call = entries[i].calls[0]
        if entries[i].raw.get("type") in ANSWERED_BY_CLIENT and i not in answered \
                and call.id not in made:
            out.append(cancelled_output(entries[i]))
            origins.append(None)
            made.add(call.id)
    return len(made)
