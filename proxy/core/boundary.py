"""Where a conversation may be cut without splitting a tool-call group (SPEC §5's cutoff rules).

A cut `b` splits the list into `entries[:b]` and `entries[b:]`. It is safe when it splits
nothing the providers pair up:
- `entries[b]` is not a tool result (the kept part never starts with one), nor a chat
  `role: "function"` message, the deprecated form of one (it answers the `function_call` of
  the assistant message right before it);
- `entries[b-1]` is not a Responses `reasoning` item (it stays directly before what it produced),
  nor an output that follows one with only outputs between (a messy client's, astray);
- no call made before `b` is answered at or after `b`;
- the consecutive items one Responses step produced (its message and parallel calls) stay on
  one side: their server ids name the reasoning item before the first of them. An
  `item_reference` counts as such an item: it may stand for the step's reasoning item (a
  store-on client echoes reasoning by reference and calls whole), and a cut after it would
  summarize the reasoning away and keep the call it produced, which upstream then refuses.
The summary cutoff, the protected window and the stages all move their cuts with these helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, chain, compress, count, repeat
from operator import and_, attrgetter, is_, is_not, not_, or_

from proxy.conversation import Api, Entry, Kind, leading_instructions, reference_id
from proxy.core.kinds import ASSISTANT, CALL, OTHER, REASONING, RESPONSES, RESULT
from proxy.core.legacy_calls import is_legacy_result
from proxy.core.reasoning_items import is_produced


def safe_cuts(entries: Sequence[Entry]) -> list[bool]:
    """`safe[b]` for every cut `b` in `0..len(entries)`."""
    # The rules of one or two entries are read in C: a long thread has hundreds of cuts.
    kinds = list(map(_KIND, entries))
    no_result = [*map(is_not, kinds, repeat(RESULT)), True]  # the kept part's first
    for i in compress(count(), map(is_, kinds, repeat(OTHER))):
        no_result[i] = not is_legacy_result(entries[i])
    no_reasoning = chain((True,), map(is_not, kinds, repeat(REASONING)))  # what it produced
    closed = map(not_, _open_call_spans(entries))
    safe = list(map(and_, map(and_, closed, no_result), no_reasoning))
    if REASONING in kinds:
        for b in _after_reasoning_and_outputs(kinds):
            safe[b] = False
    apis = list(map(_API, entries))
    if any(map(is_, apis, repeat(RESPONSES))):
        produced = _produced(entries, kinds, apis)
        for b in compress(count(1), map(and_, produced[1:], produced)):
            safe[b] = False  # one step's items stay together
    return safe


_KIND, _API = attrgetter("kind"), attrgetter("api")


def _after_reasoning_and_outputs(kinds: list[Kind]) -> list[int]:
    """The cuts right after outputs that follow a reasoning item: a messy client's output
    astray there (repair drops it) does not part the reasoning from the item it produced, whose
    id names it. Only the outputs are walked, each run of them once."""
    cuts: list[int] = []
    after_reasoning, previous = False, -2
    for i in compress(count(), map(is_, kinds, repeat(RESULT))):
        if i != previous + 1:  # a run of outputs begins: what stands before it?
            after_reasoning = i > 0 and kinds[i - 1] is REASONING
        previous = i
        if after_reasoning:
            cuts.append(i + 1)
    return cuts


def _produced(entries: Sequence[Entry], kinds: list[Kind], apis: list[Api]) -> list[bool]:
    """`is_produced` of each entry, read in C from its kind; only an `OTHER` item (a server
    call of some type, an `item_reference`) is asked in Python."""
    produced = list(map(and_, map(is_, apis, repeat(RESPONSES)),
                        map(or_, map(is_, kinds, repeat(ASSISTANT)), map(is_, kinds, repeat(CALL)))))
    for i in compress(count(), map(is_, kinds, repeat(OTHER))):
        produced[i] = is_produced(entries[i]) or reference_id(entries[i]) is not None
    return produced


def _open_call_spans(entries: Sequence[Entry]) -> list[int]:
    """For each cut, how many calls made before it are answered at or after it."""
    # A loop, not `map`s: counted in C with one dict and two Counters it took about three
    # times as long (many passes over hundreds of cuts).
    diff = [0] * (len(entries) + 2)
    latest_call: dict[str, int] = {}
    for i, entry in enumerate(entries):
        for call in entry.calls:
            latest_call[call.id] = i
        if entry.kind is RESULT and entry.answers in latest_call:
            start = latest_call[entry.answers] + 1
            diff[start] += 1
            diff[i + 1] -= 1
    return list(accumulate(diff[:len(entries) + 1]))


def cut_at_or_before(safe: Sequence[bool], index: int, floor: int = 0) -> int | None:
    """The latest safe cut in `floor..index`, or None."""
    for b in range(min(index, len(safe) - 1), floor - 1, -1):
        if safe[b]:
            return b
    return None


def cut_at_or_after(safe: Sequence[bool], index: int) -> int | None:
    """The earliest safe cut in `index..len(entries)`, or None."""
    for b in range(max(index, 0), len(safe)):
        if safe[b]:
            return b
    return None


def nearest_safe_cut(entries: Sequence[Entry], index: int, safe: Sequence[bool] | None = None) -> int:
    """Move a cut to the nearest safe one: earlier first, later when earlier would reach the
    leading system messages (a cut there would leave nothing before it to summarize).

    Answers the leading-instructions boundary when no safe cut lies after it.
    """
    safe = safe_cuts(entries) if safe is None else safe
    lead = leading_instructions(entries)
    earlier = cut_at_or_before(safe, index, lead + 1)
    if earlier is not None:
        return earlier
    later = cut_at_or_after(safe, max(index, lead + 1))
    return later if later is not None else lead


def is_safe_cut(entries: Sequence[Entry], index: int) -> bool:
    return 0 <= index <= len(entries) and safe_cuts(entries)[index]
