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

The summary's cut obeys one rule more (`summary_cuts`): it never falls before an item a step
may have produced when only outputs and such items (or references) stand between it and a
reasoning item (or a reference). A client may put a call's output between two calls of one
step, or an output astray there; the call after it may then name the reasoning item that the
summary would take. A reference after outputs may stand for the next step's reasoning item, as
`safe_cuts` takes it: the summary may cut before one (a store-on client echoes every item so),
unless its id begins as OpenAI's ids of calls, messages and server items do (`fc_`, `msg_`,
`ws_`, ...): such a reference stands for a produced item, never for a reasoning item.
The rule reads only what lies before the cut, so a checkpoint's cut stays as safe as it was
while the list grows. The protected window's start may sit at the list's end, where the rule
would turn unsafe once the next item comes; so the window keeps to `safe_cuts` alone.
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


def summary_cuts(entries: Sequence[Entry]) -> list[bool]:
    """`safe_cuts`, less the cuts that could part a step's items across its outputs."""
    safe = safe_cuts(entries)
    for b in _steps_parted_by_outputs(entries):
        safe[b] = False
    return safe


def is_summary_cut(entries: Sequence[Entry], index: int) -> bool:
    """`summary_cuts(entries)[index]`, the step rule walked back from `index` alone (a
    checkpoint's cut is checked on every request)."""
    return 0 <= index <= len(entries) and safe_cuts(entries)[index] and not (
        0 < index < len(entries) and entries[index - 1].kind is RESULT
        and _surely_produced(entries[index]) and _step_began_before(entries, index - 1))


def _step_item(entry: Entry) -> bool:
    return is_produced(entry) or reference_id(entry) is not None


# OpenAI checks the prefix of an item's id ("Expected an ID that begins with 'fc'", PROTOCOL.md
# §2.3): a reference to an id of these forms names a function call, a custom tool call, a
# message, or one of the server items a reasoning item produces (`ID_REQUIRED`: web search,
# file search, computer, code interpreter, image generation, local shell, MCP call, tool
# list, approval request), as OpenAI's documented examples of each spell it. A reasoning
# item's id begins `rs_`.
_PRODUCED_ID_PREFIXES = ("fc_", "ctc_", "msg_", "ws_", "fs_", "cu_", "ci_", "ig_", "lsh_",
                         "mcp_", "mcpl_", "mcpr_")


def _surely_produced(entry: Entry) -> bool:
    """An item a step produced, or a reference that can stand for nothing else."""
    return is_produced(entry) or _names_produced(entry)


def _names_produced(entry: Entry) -> bool:
    named = reference_id(entry)
    return named is not None and named.startswith(_PRODUCED_ID_PREFIXES)


def _step_began_before(entries: Sequence[Entry], last: int) -> bool:
    """Whether a reasoning item (or a reference) began the run of outputs and step items that
    ends at `last`."""
    for i in range(last, -1, -1):
        entry = entries[i]
        if entry.kind is REASONING or reference_id(entry) is not None:
            return True
        if entry.kind is not RESULT and not _step_item(entry):
            return False
    return False


def _steps_parted_by_outputs(entries: Sequence[Entry]) -> list[int]:
    """The cuts before a step's item (not a reference, unless its id tells it is one) that
    follows outputs, in a run of outputs and such items that a reasoning item (or a reference)
    began."""
    cuts: list[int] = []
    if not any(map(is_, map(_API, entries), repeat(RESPONSES))):
        return cuts
    in_step = after_output = False
    for i, entry in enumerate(entries):
        if entry.kind is RESULT:
            after_output = True
            continue
        produced = is_produced(entry)
        if in_step and after_output and (produced or _names_produced(entry)):
            cuts.append(i)
        in_step = entry.kind is REASONING or reference_id(entry) is not None or (in_step and produced)
        after_output = False
    return cuts


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
