"""Tool steps: a call message (or a step's call items) with the results right after it.

Chat: one assistant message with `tool_calls` and the run of `tool` messages after it, or one
with a legacy `function_call` and the `function` message after it (`legacy_calls`).
Responses: the reasoning items before a step's consecutive call items, those items, and the
run of output items after them; when the step has a reasoning item, also the later call items
that follow those outputs (a client that answers each call as it goes: a later call's id may
name the step's reasoning item), and their outputs. Collapse works on these units: parallel
calls are one unit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from proxy.conversation import Entry, ToolCall
from proxy.core.kinds import ASSISTANT, CALL, CHAT, REASONING, RESULT
from proxy.core.legacy_calls import answered, is_legacy_result, legacy_call


class Group(NamedTuple):
    """One step. A named tuple, not a frozen dataclass: a steady thread builds every step again
    on each request, and a frozen dataclass takes about five times as long to build."""

    start: int  # first entry of the step (its reasoning items, in Responses)
    end: int  # one past its last result
    calls: tuple[ToolCall, ...]
    call_entries: tuple[int, ...]  # the entries that carry the calls
    results: tuple[int, ...]  # the result entries right after them (after each run of calls)

    def answered_once(self, entries: Sequence[Entry]) -> bool:
        """Every call has exactly one result in the run, and the run answers nothing else."""
        ids = [c.id for c in self.calls]
        if len(ids) == 1:  # the common case, without the sets
            return len(self.results) == 1 and answered(entries, self.results[0]) == ids[0]
        answers = [answered(entries, i) for i in self.results]
        return len(set(ids)) == len(ids) == len(answers) and set(answers) == set(ids)


def tool_groups(entries: Sequence[Entry], start: int = 0) -> list[Group]:
    """The steps found scanning from `start` (a step's end, or 0)."""
    groups = []
    i = start
    while i < len(entries):
        entry = entries[i]
        if entry.api is CHAT and not entry.calls and "function_call" not in entry.raw:
            i += 1  # what `_group_at` would say, without the call: most messages are not steps
            continue
        group = _group_at(entries, i)
        if group is None:
            i += 1
            continue
        groups.append(group)
        i = group.end
    return groups


def _group_at(entries: Sequence[Entry], i: int) -> Group | None:
    entry = entries[i]
    if entry.api is CHAT:
        if entry.kind is not ASSISTANT:
            return None
        if entry.calls:
            end = _results_end(entries, i + 1)
            return Group(i, end, entry.calls, (i,), tuple(range(i + 1, end)))
        return _legacy_group(entries, i)
    first = i
    while first < len(entries) and entries[first].kind is REASONING:
        first += 1
    if first == len(entries) or entries[first].kind is not CALL:
        return None
    last = first
    while last < len(entries) and entries[last].kind is CALL:
        last += 1
    end = _results_end(entries, last)
    call_entries, results = list(range(first, last)), list(range(last, end))
    # A client that answers each call as it goes parts a step's calls by outputs; a later one
    # may carry an id that names this step's reasoning item, so it stays in the step. So does
    # one without an id: a call after it may carry one. Only the first entry after the outputs
    # decides: where a step ends depends on nothing after it (`collapse._Folded`).
    while first > i and end < len(entries) and entries[end].kind is CALL:
        more = end
        while more < len(entries) and entries[more].kind is CALL:
            more += 1
        call_entries += range(end, more)
        end = _results_end(entries, more)
        results += range(more, end)
    calls = tuple(c for k in call_entries for c in entries[k].calls)
    return Group(i, end, calls, tuple(call_entries), tuple(results))


def _legacy_group(entries: Sequence[Entry], i: int) -> Group | None:
    """A legacy call and the `function` message after it, if one is: the form answers a call
    with the very next message only."""
    call = legacy_call(entries[i])
    if call is None:
        return None
    end = i + 2 if i + 1 < len(entries) and is_legacy_result(entries[i + 1]) else i + 1
    return Group(i, end, (call,), (i,), tuple(range(i + 1, end)))


def _results_end(entries: Sequence[Entry], i: int) -> int:
    while i < len(entries) and entries[i].kind is RESULT:
        i += 1
    return i
