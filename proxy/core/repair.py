"""Protocol repair: make the tool-call structure of a conversation valid (SPEC §5, issue 4.6).

- A call with no result gets an explicit cancelled result, placed right after its group (the
  call message and the results that follow it). The text and the position depend only on the
  input, so the same input gives the same bytes and prompt caches stay warm. The text says the
  call was cancelled; it never claims an outcome.
- A result with no call before it is dropped; in chat also one that is not in the run of tool
  messages right after its call's message (the providers pair by adjacency there). Responses
  pairs by `call_id` anywhere later, so a later output still answers its call. An
  `item_reference` before an output may stand for its call (stored upstream, unseen here):
  such an output is not provably orphaned and stays.
- A second result for the same call is dropped.
- The parallel calls of one assistant message (of one step, in Responses) are one unit.
- Responses: a reasoning item left without the item it produced is dropped, and the server
  ids of items that followed it are removed (`reasoning_items`).
A conversation that is already valid comes out as the same tuple of the same entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain, compress, repeat
from operator import attrgetter, is_

from proxy.conversation import Api, Entries, Entry, Kind, ToolCall, content_text, make_result
from proxy.core.checked import CheckedLists
from proxy.core.kinds import CALL, REASONING, RESULT
from proxy.core.memo import memoized
from proxy.core.reasoning_items import drop_reasoning, is_produced, unfollowed_reasoning

CANCELLED_TEXT = ("[Tool call cancelled: the call was interrupted before it returned a result. "
                  "No output was recorded for it.]")
_CANCELLED = ("repair.cancelled",)
# Responses call types the client answers with an output item; others run on the server.
_ANSWERED_BY_CLIENT = ("function_call", "custom_tool_call")
# Lists found valid: a steady thread's check walks only what its last request did not have.
# What a valid chat list leaves open: nothing. A Responses one: whether an item_reference came.
_VALID_CHAT: CheckedLists[tuple[()]] = CheckedLists(4096, ())
_VALID_RESPONSES: CheckedLists[bool] = CheckedLists(4096, False)


@dataclass(frozen=True, slots=True)
class Repaired:
    entries: Entries
    origins: tuple[int | None, ...]  # per output entry: its input index; None when made here
    cancelled: int = 0
    dropped_results: int = 0
    dropped_reasoning: int = 0
    ids_removed: int = 0

    @property
    def changed(self) -> int:
        return self.cancelled + self.dropped_results + self.dropped_reasoning + self.ids_removed


def is_cancelled(entry: Entry) -> bool:
    """Whether an entry's text is the cancelled result repair writes (memoized)."""
    return memoized(entry, _CANCELLED, _says_cancelled)


def _says_cancelled(entry: Entry) -> bool:
    return content_text(entry) == CANCELLED_TEXT


def repair(entries: Sequence[Entry]) -> Repaired:
    entries = tuple(entries)
    if not entries:
        return Repaired(entries, ())
    if entries[0].api is Api.CHAT:
        if _valid_chat(entries):
            return Repaired(entries, tuple(range(len(entries))))
        return _finish(entries, *_pair_chat(entries))
    if _valid_responses(entries):
        return Repaired(entries, tuple(range(len(entries))))
    return _finish(entries, *_pair_responses(entries))


def _finish(original: Entries, out: list[Entry], origins: list[int | None],
            cancelled: int, dropped: int) -> Repaired:
    gone = unfollowed_reasoning(out) if original[0].api is Api.RESPONSES else set()
    lost = drop_reasoning(out, origins, lambda i, _: i in gone)
    if not (cancelled or dropped or lost.reasoning):
        return Repaired(original, tuple(range(len(original))))
    return Repaired(lost.entries, lost.origins, cancelled, dropped, lost.reasoning, lost.ids_removed)


def _valid_chat(entries: Entries) -> bool:
    """What `_pair_chat` would find nothing to do in, without building its lists: every tool
    message in the run right after its call message, answering one of its calls once, and
    every call answered (the usual case, checked on every request)."""
    return _VALID_CHAT.check(entries, _valid_chat_from)


def _valid_chat_from(entries: Entries, start: int, _: tuple[()] = ()) -> tuple[()] | None:
    """`_valid_chat` by walking `entries[start:]`, where `entries[:start]` is a valid list;
    None when it is not valid.

    The end of a valid list closes every call message's run of results with all of its calls
    answered; a tool message there answers nothing, as it would at the start of a list."""
    i, n = start, len(entries)
    while i < n:
        entry = entries[i]
        i += 1
        if entry.kind is RESULT:
            return None
        if not entry.calls:
            continue
        ids = {c.id for c in entry.calls}
        answered: set[str | None] = set()
        while i < n and entries[i].kind is RESULT:
            answer = entries[i].answers
            if answer not in ids or answer in answered:
                return None
            answered.add(answer)
            i += 1
        if len(answered) != len(ids):
            return None
    return ()


def _pair_chat(entries: Entries) -> tuple[list[Entry], list[int | None], int, int]:
    out: list[Entry] = []
    origins: list[int | None] = []
    cancelled = dropped = 0
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if entry.kind is Kind.RESULT:
            dropped += 1  # not in the tool run right after its call
            continue
        out.append(entry)
        origins.append(i - 1)
        if not entry.calls:
            continue
        answered: set[str] = set()
        ids = {c.id for c in entry.calls}
        while i < len(entries) and entries[i].kind is Kind.RESULT:
            result = entries[i]
            if result.answers in ids and result.answers not in answered:
                answered.add(result.answers)
                out.append(result)
                origins.append(i)
            else:
                dropped += 1
            i += 1
        for call in _unanswered(entry.calls, answered):
            out.append(make_result(Api.CHAT, call, CANCELLED_TEXT))
            origins.append(None)
            cancelled += 1
    return out, origins, cancelled, dropped


def _unanswered(calls: Sequence[ToolCall], answered: set[str]) -> list[ToolCall]:
    seen: set[str] = set()
    missing = []
    for call in calls:
        if call.id not in answered and call.id not in seen:
            missing.append(call)
        seen.add(call.id)
    return missing


def _valid_responses(entries: Entries) -> bool:
    """What `_pair_responses` and `_finish` would find nothing to do in: every output answers
    a call made before it (or after an item_reference), once; every call the client answers
    is answered; every reasoning item is followed by an item it produced."""
    return _VALID_RESPONSES.check(entries, _valid_responses_from)


def _valid_responses_from(entries: Entries, start: int, referenced: bool = False) -> bool | None:
    """`_valid_responses` by walking `entries[start:]`, where `entries[:start]` is a valid
    list (`referenced`: an item_reference is in it); None when it is not valid, else whether
    an item_reference came.

    A valid list answers each of its client calls itself, and ends in no reasoning item; what
    it leaves to the entries after it is the calls it made and the outputs it gave, read from
    it (in C) only when an output or a call follows."""
    seen: set[str] = set()
    answered: set[str] = set()
    asked: list[str] = []  # the calls the client answers
    earlier: tuple[set[str], set[str]] | None = None  # the calls and outputs of entries[:start]
    for i in range(start, len(entries)):
        entry = entries[i]
        kind = entry.kind
        if kind is REASONING:
            if i + 1 == len(entries) or not is_produced(entries[i + 1]):
                return None
        elif kind is CALL:
            seen.add(entry.calls[0].id)
            if entry.raw.get("type") in _ANSWERED_BY_CLIENT:
                asked.append(entry.calls[0].id)
        elif kind is RESULT:
            if earlier is None:
                earlier = _calls_and_outputs(entries[:start])
            answer: str = entry.answers  # type: ignore[assignment]
            if answer in answered or answer in earlier[1]:
                return None
            if not (referenced or answer in seen or answer in earlier[0]):
                return None
            answered.add(answer)
        elif entry.raw.get("type") == "item_reference":
            referenced = True
    if asked and not answered.issuperset(asked):
        if earlier is None:
            earlier = _calls_and_outputs(entries[:start])
        if not earlier[1].union(answered).issuperset(asked):
            return None
    return referenced


def _calls_and_outputs(entries: Entries) -> tuple[set[str], set[str]]:
    """The ids of the calls made and of the calls answered, read in C."""
    made = set(map(_ID, chain.from_iterable(map(_CALLS, entries))))
    results = map(is_, map(_KIND, entries), repeat(RESULT))
    return made, set(compress(map(_ANSWERS, entries), results))


_KIND, _CALLS, _ANSWERS, _ID = (attrgetter("kind"), attrgetter("calls"), attrgetter("answers"),
                                attrgetter("id"))


def _kept_outputs(entries: Entries) -> tuple[list[bool], set[str]]:
    """Which outputs answer a call made before them, first answer only; and the answered ids."""
    seen: set[str] = set()
    answered: set[str] = set()
    referenced = False  # an item_reference came first: any call id may be behind it
    keep = [True] * len(entries)
    for i, entry in enumerate(entries):
        for call in entry.calls:
            seen.add(call.id)
        referenced = referenced or entry.raw.get("type") == "item_reference"
        if entry.kind is Kind.RESULT:
            keep[i] = (entry.answers in seen or referenced) and entry.answers not in answered
            if keep[i]:
                answered.add(entry.answers)  # type: ignore[arg-type]
    return keep, answered


def _pair_responses(entries: Entries) -> tuple[list[Entry], list[int | None], int, int]:
    keep, answered = _kept_outputs(entries)
    out: list[Entry] = []
    origins: list[int | None] = []
    cancelled = 0
    group: list[Entry] = []  # the call items of the current step, open until its outputs end
    previous: Kind | None = None
    for i, entry in enumerate(entries):
        extends = entry.kind is Kind.RESULT or (entry.kind is Kind.CALL and previous is Kind.CALL)
        if not extends:
            cancelled += _close_group(group, answered, out, origins)
        if entry.kind is Kind.CALL:
            group.append(entry)
        if keep[i]:
            out.append(entry)
            origins.append(i)
        previous = entry.kind
    cancelled += _close_group(group, answered, out, origins)
    return out, origins, cancelled, keep.count(False)


def _close_group(group: list[Entry], answered: set[str], out: list[Entry],
                 origins: list[int | None]) -> int:
    made = 0
    for entry in group:
        if entry.raw.get("type") in _ANSWERED_BY_CLIENT and entry.calls[0].id not in answered:
            out.append(make_result(Api.RESPONSES, entry.calls[0], CANCELLED_TEXT))
            origins.append(None)
            answered.add(entry.calls[0].id)
            made += 1
    group.clear()
    return made
