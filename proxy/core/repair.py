"""Protocol repair: make the tool-call structure of a conversation valid (SPEC §5, issue 4.6).

- A call with no result gets an explicit cancelled result, placed right after its group (the
  call message and the results that follow it). The text and the position depend only on the
  input, so the same input gives the same bytes and prompt caches stay warm. The text says the
  call was cancelled; it never claims an outcome.
- A result with no call before it is dropped; in chat also one that is not in the run of tool
  messages right after its call's message (the providers pair by adjacency there), unless it
  answers a call of that message left open and only user, system or developer messages stand
  between: then it is moved to the end of the run (a client that let the user speak while a
  tool ran, or put a reminder there). Its output is real: cancelling the call would tell the
  model that nothing was recorded, and a model told so may run a deploy again. Responses
  pairs by `call_id` anywhere later, so a later output still answers its call. An
  `item_reference` before an output may stand for its call (stored upstream, unseen here):
  such an output is not provably orphaned and stays.
- A second result for the same call is dropped. A call id may come back in a later step
  (servers that number calls per response): a Responses output answers the step of the latest
  call with its id. An earlier step's call left open there gets its own cancelled result, the
  one it got before its id came back, so the bytes sent before stay in front (caches).
- The parallel calls of one assistant message (of one step, in Responses) are one unit.
- Chat's deprecated single call (`function_call`, `legacy_calls`) is such a unit too, and the
  `function` message of its name right after it its result: the form has no ids, so the
  cancelled result is a `function` message with the call's name, and a `function` message
  anywhere else (or under another name) is dropped as an orphan result is. A `tool` message
  never answers a legacy call, nor a `function` message a tool call.
- Chat: when a cancelled result is directly followed by a user message, a short assistant text
  note (`INTERRUPTED_NOTE`) goes between them. Mistral refuses a `user` right after a `tool`
  (code 3230, PROTOCOL.md §2.1); an assistant text message is valid after tool results and
  before a user message everywhere (collapse's docstring says why not a user or system one).
  It opens with a bracketed note that the proxy wrote it and claims no outcome. After a moved
  result, the note (`MOVED_NOTE`) says the result came after the message that follows. Responses is
  left as it is: Mistral has no Responses API, and no Responses rule in PROTOCOL.md refuses
  a user item after an output.
- Responses: a `computer_call` with no output is refused upstream too ("No tool output found
  for computer call ...", seen by computer-use clients), but its output must be a screenshot:
  the call is taken out and an assistant note (`computer_calls`) goes at the end of its step,
  naming the action and claiming no outcome. A reasoning item left right before the note (it
  produced the call) goes too.
- Responses: a reasoning item left without the item it produced is dropped, and the server
  ids of items that followed it are removed, or the items themselves when their id is required
  (`reasoning_items`), with their outputs, a cancelled one made here too. A call that shared
  such an output (one id in one step) is answered again, by a cancelled output of its own kind.
A conversation that is already valid comes out as the same tuple of the same entries.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from itertools import compress, count, repeat
from operator import attrgetter, is_, itemgetter

from proxy.conversation import (Api, Entries, Entry, Kind, ToolCall, content_text, make_assistant,
                                make_result, reference_id)
from proxy.core.checked import CheckedLists
from proxy.core.computer_calls import NOTE_OPENING
from proxy.core.kinds import CALL, REASONING, RESULT
from proxy.core.legacy_calls import (answers_legacy_call, is_chat_result, legacy_answer,
                                     legacy_call, make_legacy_result, step_calls)
from proxy.core.memo import memoized
from proxy.core.reasoning_items import drop_reasoning, is_produced, unfollowed_reasoning
from proxy.core.responses_pairing import ANSWERED_BY_CLIENT, CANCELLED_TEXT, SCREENSHOT_CALL
from proxy.core.responses_pairing import pair_responses as _pair_responses

_CANCELLED = ("repair.cancelled",)
_CANCELLED_SHELL_OUTPUT = make_result(Api.RESPONSES, ToolCall("", "shell_call", ""), CANCELLED_TEXT,
                                      "shell_call").raw["output"]
INTERRUPTED_NOTE = (NOTE_OPENING + "the tool call(s) above marked cancelled were interrupted "
                    "before returning a result; the outcome is unknown.]")
MOVED_NOTE = (NOTE_OPENING + "the tool result(s) above arrived after the message below was "
              "sent; they are placed here to keep each tool call with its result.]")
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
    dropped_items: int = 0  # client items gone with their reasoning item (server items, outputs)
    notes: int = 0  # chat: assistant notes put between a cancelled result and a user message
    dropped_calls: int = 0  # Responses: unanswered computer calls, each replaced by a note
    moved_results: int = 0  # chat: results moved back to their call's run

    @property
    def changed(self) -> int:
        return (self.cancelled + self.dropped_results + self.dropped_reasoning + self.ids_removed
                + self.dropped_items + self.notes + self.dropped_calls + self.moved_results)


def is_cancelled(entry: Entry) -> bool:
    """Whether an entry is the cancelled result repair writes (memoized)."""
    return memoized(entry, _CANCELLED, _says_cancelled)


def _says_cancelled(entry: Entry) -> bool:
    # A shell call's output is a list of outcomes, with the text in `stderr`, not a text.
    if entry.api is Api.RESPONSES and entry.raw.get("type") == "shell_call_output":
        return entry.raw.get("output") == _CANCELLED_SHELL_OUTPUT
    return content_text(entry) == CANCELLED_TEXT


def repair(entries: Sequence[Entry]) -> Repaired:
    entries = tuple(entries)
    if not entries:
        return Repaired(entries, ())
    if entries[0].api is Api.CHAT:
        if _valid_chat(entries):
            return Repaired(entries, tuple(range(len(entries))))
        out, origins, cancelled, dropped, moved = _pair_chat(entries)
        notes = _note_before_users(out, origins, moved)
        return _finish(entries, out, origins, cancelled, dropped, notes, moved=len(moved))
    if _valid_responses(entries):
        return Repaired(entries, tuple(range(len(entries))))
    out, origins, cancelled, dropped, replaced = _pair_responses(entries)
    # A reasoning item right before a note produced the call it stands for: left there, it
    # would be followed by an item it did not produce.
    doomed = {p - 1 for p in replaced if p and out[p - 1].kind is REASONING}
    return _finish(entries, out, origins, cancelled, dropped, doomed=doomed,
                   dropped_calls=len(replaced), step_ends=replaced)


def _finish(original: Entries, out: list[Entry], origins: list[int | None], cancelled: int,
            dropped: int, notes: int = 0, doomed: frozenset[int] | set[int] = frozenset(),
            dropped_calls: int = 0, step_ends: Sequence[int] = (), moved: int = 0) -> Repaired:
    gone = unfollowed_reasoning(out) | doomed if original[0].api is Api.RESPONSES else set()
    # A note ends its step as the output it stands in for would: what follows it is another
    # response's, even when no reasoning item of its own comes before it.
    lost = drop_reasoning(out, origins, lambda i, _: i in gone, step_ends=step_ends)
    if not (cancelled or dropped or lost.reasoning or dropped_calls or moved):
        return Repaired(original, tuple(range(len(original))))
    # A cancelled output made for an id-required call (a local shell call) goes with the call
    # when its reasoning item goes (a note answers nothing: it never goes). The counts are of
    # what goes upstream and of what of the input was left out.
    made_gone = origins.count(None) - lost.origins.count(None)
    done = Repaired(lost.entries, lost.origins, cancelled - made_gone, dropped, lost.reasoning,
                    lost.ids_removed, lost.items_dropped - made_gone, notes, dropped_calls, moved)
    # An output gone with its call answered another call of its step too (one id): that one
    # is open again. Each pass only takes items out or answers calls, so this ends.
    return _then(done, repair(lost.entries)) if lost.items_dropped else done


def _then(first: Repaired, second: Repaired) -> Repaired:
    """`second` (a repair of `first.entries`) counted against the input of `first`."""
    if not second.changed:
        return first
    origins = tuple(None if o is None else first.origins[o] for o in second.origins)
    made_gone = first.origins.count(None) - sum(1 for o in second.origins
                                                if o is not None and first.origins[o] is None)
    return Repaired(second.entries, origins, first.cancelled + second.cancelled - made_gone,
                    first.dropped_results + second.dropped_results,
                    first.dropped_reasoning + second.dropped_reasoning,
                    first.ids_removed + second.ids_removed,
                    first.dropped_items + second.dropped_items - made_gone,
                    first.notes + second.notes, first.dropped_calls + second.dropped_calls,
                    first.moved_results + second.moved_results)


def _valid_chat(entries: Entries) -> bool:
    """What `_pair_chat` would find nothing to do in, without building its lists: every tool
    message in the run right after its call message, answering one of its calls once, every
    call answered, and every legacy call answered by the message right after it, the only
    place a `function` message may be (the usual case, checked on every request)."""
    return _VALID_CHAT.check(entries, _valid_chat_from)


def _valid_chat_from(entries: Entries, start: int, _: tuple[()] = ()) -> tuple[()] | None:
    """`_valid_chat` by walking `entries[start:]`, where `entries[:start]` is a valid list;
    None when it is not valid.

    The end of a valid list closes every call message's run of results with all of its calls
    answered; a result there answers nothing, as it would at the start of a list."""
    i, n = start, len(entries)
    while i < n:
        entry = entries[i]
        i += 1
        if is_chat_result(entry):
            return None
        if not entry.calls:
            call = legacy_call(entry)
            if call is not None:  # answered by the very next message, or not at all
                if i == n or not answers_legacy_call(entries[i], call):
                    return None
                i += 1
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


def _pair_chat(entries: Entries) -> tuple[list[Entry], list[int | None], int, int, set[int]]:
    """The repaired list, its origins, how many results were made and dropped, and the input
    indexes of the results moved back to their call's run."""
    out: list[Entry] = []
    origins: list[int | None] = []
    cancelled = dropped = 0
    moved: set[int] = set()
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if is_chat_result(entry):
            if i - 1 not in moved:
                dropped += 1  # not in the run of results right after its call
            continue
        out.append(entry)
        origins.append(i - 1)
        calls = step_calls(entry)
        if not calls:
            continue
        # a `function` message has no `answers`: it answers no tool call
        answer_of = _ANSWERS if entry.calls else partial(legacy_answer, calls[0])
        answered: set[str] = set()
        ids = {c.id for c in calls}
        while i < len(entries) and is_chat_result(entries[i]):
            answer = answer_of(entries[i])
            if answer in ids and answer not in answered:
                answered.add(answer)  # type: ignore[arg-type]
                out.append(entries[i])
                origins.append(i)
            else:
                dropped += 1
            i += 1
        missing = _unanswered(calls, answered)
        if missing and entry.calls:
            for late in _late_results(entries, i, {c.id for c in missing}):
                answered.add(entries[late].answers)  # type: ignore[arg-type]
                out.append(entries[late])
                origins.append(late)
                moved.add(late)
            missing = _unanswered(calls, answered)
        for call in missing:
            out.append(make_result(Api.CHAT, call, CANCELLED_TEXT) if entry.calls
                       else make_legacy_result(call, CANCELLED_TEXT))
            origins.append(None)
            cancelled += 1
    return out, origins, cancelled, dropped, moved


def _late_results(entries: Entries, start: int, missing: set[str]) -> list[int]:
    """The indexes of the first `tool` message answering each of `missing` after `start` (the
    end of the calls' run), where nothing but user, system or developer messages (and other
    results, orphans there) stands between: past an assistant message the model went on
    without the result, and it is no longer this run's."""
    found: list[int] = []
    for k in range(start, len(entries)):
        entry = entries[k]
        if entry.kind is not Kind.USER and entry.kind is not Kind.INSTRUCTION and not (
                is_chat_result(entry)):
            break
        answer = entry.answers if entry.kind is Kind.RESULT else None
        if answer in missing and entry.raw.get("role") == "tool":
            missing = missing - {answer}
            found.append(k)
            if not missing:
                break
    return found


def _note_before_users(out: list[Entry], origins: list[int | None], moved: set[int]) -> int:
    """Puts `INTERRUPTED_NOTE` between each cancelled result made here and a user message
    right after it, in place, and `MOVED_NOTE` after a moved result there; how many. A made
    result ends its call's run of results, so the note never splits a run."""
    at = [p + 1 for p in range(len(out) - 1)
          if (origins[p] is None or origins[p] in moved) and is_chat_result(out[p])
          and out[p + 1].kind is Kind.USER]
    for p in reversed(at):
        note = INTERRUPTED_NOTE if origins[p - 1] is None else MOVED_NOTE
        out.insert(p, make_assistant(Api.CHAT, note))
        origins.insert(p, None)
    return len(at)


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
    a call still open before it (or one behind an item_reference), once; every call the
    client answers has an output after it; every reasoning item is followed by an item it
    produced."""
    return _VALID_RESPONSES.check(entries, _valid_responses_from)


def _valid_responses_from(entries: Entries, start: int, referenced: bool = False) -> bool | None:
    """`_valid_responses` by walking `entries[start:]`, where `entries[:start]` is a valid
    list (`referenced`: an item_reference is in it); None when it is not valid, else whether
    an item_reference came.

    A valid list answers each of its client calls itself, and ends in no reasoning item; what
    it leaves to the entries after it is where it last made and answered each call id, read
    from it (in C) only when an output follows. An output answers the calls open before it
    (`responses_pairing`): made since the last output with their id, in the latest step that made
    it; a client call whose id a later step makes again before an output came has none."""
    made: set[str] = set()  # call ids made in entries[start:]
    open_ids: set[str] = set()
    answered: set[str] = set()
    pending: set[str] = set()  # client calls no output has followed yet
    step: set[str] = set()  # those of them the latest run of call items (one step) made
    last = None  # the kind of the entry before
    earlier: tuple[dict[str, int], dict[str, int]] | None = None
    for i in range(start, len(entries)):
        entry = entries[i]
        kind = entry.kind
        if kind is REASONING:
            if i + 1 == len(entries) or not is_produced(entries[i + 1]):
                return None
        elif kind is CALL:
            call_id = entry.calls[0].id
            if last is not CALL:
                step = set()
            if call_id in pending and call_id not in step:
                return None  # made again in a later step: the earlier call has no output
            made.add(call_id)
            open_ids.add(call_id)
            type_ = entry.raw.get("type")
            if type_ in ANSWERED_BY_CLIENT or type_ == SCREENSHOT_CALL:
                pending.add(call_id)
                step.add(call_id)
        elif kind is RESULT:
            if earlier is None:
                earlier = _last_calls_and_outputs(entries[:start])
            answer: str = entry.answers  # type: ignore[assignment]
            if not (answer in open_ids or _open_before(answer, made, answered, earlier, referenced)):
                return None
            open_ids.discard(answer)
            answered.add(answer)
            pending.discard(answer)
        elif reference_id(entry) is not None:
            referenced = True
        last = kind
    return None if pending else referenced


def _open_before(answer: str, made: set[str], answered: set[str],
                 earlier: tuple[dict[str, int], dict[str, int]], referenced: bool) -> bool:
    """Whether a call `answer` left open by the walked-over list (or hidden behind an
    item_reference, never made nor answered) awaits this output; the walk has not used the id."""
    if answer in made or answer in answered:
        return False
    last_call, last_output = earlier
    if answer in last_call:
        return last_call[answer] > last_output.get(answer, -1)
    return referenced and answer not in last_output


def _last_calls_and_outputs(entries: Entries) -> tuple[dict[str, int], dict[str, int]]:
    """Per call id, where its last call and its last output are, read in C (a Responses
    call item carries one call)."""
    kinds = list(map(_KIND, entries))
    at_calls = list(compress(count(), map(is_, kinds, repeat(CALL))))
    at_outputs = list(compress(count(), map(is_, kinds, repeat(RESULT))))
    calls = map(_ID, map(_FIRST, map(_CALLS, map(entries.__getitem__, at_calls))))
    outputs = map(_ANSWERS, map(entries.__getitem__, at_outputs))
    return dict(zip(calls, at_calls)), dict(zip(outputs, at_outputs))


_KIND, _CALLS, _ANSWERS, _ID = (attrgetter("kind"), attrgetter("calls"), attrgetter("answers"),
                                attrgetter("id"))
_FIRST = itemgetter(0)
