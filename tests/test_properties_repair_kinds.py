"""Repair over every client-run call kind and over call ids used again in later steps (SPEC §5).

The expected pairing is read from the input by position, not from what repair reports: a call
unit is a run of consecutive call items (the parallel calls of one step); an output answers
the unit of the latest call with its id before it, once (a second output for it is a
duplicate), and nothing when no call with its id comes before it. So when a server numbers
its calls per response (`call_0` in step 3 and in step 9), the output after step 9's call is
step 9's, and step 3's call, unanswered, gets its own cancelled output. The properties:
- what goes upstream passes the fake upstream's rules, and every unit has exactly one output
  per call id, after it;
- the client's first answer of each unit is kept, byte-identical; nothing else of its outputs;
- a made output answers a unit no output of the client's answers, in its call's own kind, right
  after the unit's run of outputs; it says cancelled and never claims a success (no exit code
  0, no `completed` status);
- a reasoning item still sits right before the item it sat before;
- the report counts what the lists show;
- the same input gives the same bytes, and the repaired list stays in front, unchanged, when
  the client sends its next steps after it (prompt caches stay warm).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.conversation import Entries, Entry, Kind, content_text
from proxy.core.cascade import run_cascade
from proxy.core.computer_calls import NOTE_OPENING
from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE, MOVED_NOTE, Repaired, repair
from proxy.testing.rules import check_chat, check_responses
from tests.factories import entries_of, wire
from tests.strategies import cascade_contexts
from tests.strategies_calls import call_item, call_steps, chat_steps

Wire = dict[str, Any]
Slot = tuple[int, str]  # (index of the first call of its unit, call id)


def _type(item: Wire) -> str:
    return str(item.get("type") or "message")


def _is_call(item: Wire) -> bool:
    return _type(item).endswith("_call") and isinstance(item.get("call_id"), str)


def _answers(item: Wire) -> str | None:
    if not _type(item).endswith("_call_output"):
        return None
    found = item.get("call_id", item.get("id"))
    return found if isinstance(found, str) else None


def _pairing(items: list[Wire]) -> tuple[dict[int, Slot], dict[Slot, list[int]], dict[Slot, int]]:
    """By position: each call's slot, each slot's calls, and each slot's first answer."""
    slot_of: dict[int, Slot] = {}
    calls: dict[Slot, list[int]] = {}
    first: dict[Slot, int] = {}
    latest: dict[str, Slot] = {}
    unit = -1
    for j, item in enumerate(items):
        if _is_call(item):
            unit = j if unit < 0 or not _is_call(items[j - 1]) else unit
            slot = latest[item["call_id"]] = slot_of[j] = (unit, item["call_id"])
            calls.setdefault(slot, []).append(j)
            continue
        unit = -1
        answer = _answers(item)
        if answer in latest and latest[answer] not in first:
            first[latest[answer]] = j
    return slot_of, calls, first


# Found by these properties: `call_0` unanswered in one step and made again, answered, in a
# later one (ids numbered per step): the later output was taken for both calls.
_USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Go on."}]}
_REUSED = ([_USER, call_item("shell_call", "call_0", "a", 0), _USER],
           [call_item("shell_call", "call_0", "b", 1),
            {"type": "shell_call_output", "call_id": "call_0",
             "output": [{"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}, _USER])


def _made(out: Repaired) -> list[int]:
    return [p for p, o in enumerate(out.origins) if o is None]


def _kept(out: Repaired, kind: Kind) -> set[int]:
    """The input indexes of the client's entries of `kind` that went upstream."""
    return {o for o, e in zip(out.origins, out.entries, strict=True) if o is not None and e.kind is kind}


def _check_pairing_of_sent(sent: list[Wire]) -> None:
    """Each unit has exactly one output per call id after it, and each output answers one."""
    slot_of, calls, _ = _pairing(sent)
    answered: list[Slot] = []
    latest: dict[str, Slot] = {}
    for j, item in enumerate(sent):
        if j in slot_of:
            latest[item["call_id"]] = slot_of[j]
        elif _answers(item) is not None:
            assert _answers(item) in latest, f"the output at {j} answers no call"
            answered.append(latest[_answers(item)])  # type: ignore[index]
    assert sorted(answered) == sorted(calls), "a unit with no output, or with two"


@example((_REUSED[0] + _REUSED[1], []))
@given(call_steps())
def test_every_unit_of_every_kind_is_answered_once_by_its_own_output(drawn: tuple[list, list]) -> None:
    elements, _ = drawn
    entries = entries_of("responses", elements)
    out = repair(entries)
    sent = wire(out.entries)
    rejected = check_responses({"model": "m", "input": sent})
    assert rejected is None, rejected.body
    _check_pairing_of_sent(sent)

    slot_of, calls, first = _pairing(elements)
    kept_calls = _kept(out, Kind.CALL)
    # Only calls whose id the API requires may go (with their reasoning item; a computer call
    # no screenshot answers, for a note): the others all stay.
    assert all(elements[j]["type"] in ("local_shell_call", "computer_call")
               for j in set(slot_of) - kept_calls)
    live = {s for s, js in calls.items() if set(js) & kept_calls}
    kept_outputs = _kept(out, Kind.RESULT)
    # An output may go with a call that goes when another call of its step shares its id:
    # that one is then answered by a made output.
    whole = {s for s in live if s in first and set(calls[s]) <= kept_calls}
    assert {first[s] for s in whole} <= kept_outputs <= {first[s] for s in live if s in first}, \
        "a first answer dropped, or another kept"
    answered = {s for s in live if first.get(s) in kept_outputs}

    made_for: list[Slot] = []
    for p in _made(out):
        entry = out.entries[p]
        if entry.kind is not Kind.RESULT:
            assert entry.kind is Kind.ASSISTANT and content_text(entry).startswith(NOTE_OPENING)
            continue
        q = p - 1
        while out.entries[q].kind is Kind.RESULT:
            q -= 1
        unit = []
        while q >= 0 and out.entries[q].kind is Kind.CALL:
            unit.append(q)
            q -= 1
        mine = [u for u in unit if out.entries[u].calls[0].id == entry.answers]
        assert mine, f"the made output at {p} is not right after the unit of its call"
        slot = slot_of[out.origins[mine[0]]]  # type: ignore[index]
        made_for.append(slot)
        assert entry.raw["type"] in {f"{elements[j]['type']}_output" for j in calls[slot]}
        # After the outputs that follow the unit in the input (a later one may come next
        # once an item between them went, a dangling reasoning item).
        run_end = max(calls[slot]) + 1
        while run_end < len(elements) and _answers(elements[run_end]) is not None:
            run_end += 1
        after = [o for o in out.origins[p + 1:] if o is not None]
        assert not after or after[0] >= run_end, "a client output of the unit after a made one"
    expected = {s for s in live - answered
                if any(elements[j]["type"] != "computer_call" for j in calls[s] if j in kept_calls)}
    assert sorted(made_for) == sorted(expected)
    assert out.cancelled == len(made_for)


@given(call_steps())
def test_a_made_output_says_cancelled_and_never_a_success(drawn: tuple[list, list]) -> None:
    elements, _ = drawn
    out = repair(entries_of("responses", elements))
    for p in _made(out):
        item = out.entries[p].raw
        if out.entries[p].kind is not Kind.RESULT:
            continue
        text = json.dumps(item)
        assert CANCELLED_TEXT in text
        assert item.get("status") in (None, "failed"), "a made output claims a status"
        if item["type"] == "shell_call_output":
            assert all(o["outcome"].get("exit_code") not in (0, None) for o in item["output"])
            assert all(o["stdout"] == "" for o in item["output"])
        else:
            assert item["output"] == CANCELLED_TEXT


def _same_element(entry: Entry, original: Entry) -> bool:
    """The client's bytes, or (its reasoning item gone) its element without the server id."""
    if entry.to_bytes() == original.to_bytes():
        return True
    strip = "id" in original.raw and "id" not in entry.raw
    return strip and {k: v for k, v in original.raw.items() if k != "id"} == entry.raw


@given(call_steps())
def test_client_items_are_byte_identical_and_reasoning_keeps_its_place(drawn: tuple[list, list]) -> None:
    elements, _ = drawn
    entries = entries_of("responses", elements)
    out = repair(entries)
    origins = [o for o in out.origins if o is not None]
    assert origins == sorted(origins), "the client's items reordered"
    for entry, origin in zip(out.entries, out.origins, strict=True):
        if origin is not None:
            assert _same_element(entry, entries[origin])
    for p, (entry, origin) in enumerate(zip(out.entries, out.origins, strict=True)):
        if entry.kind is not Kind.REASONING:
            continue
        after = out.origins[p + 1]
        assert after is not None, "an item was put in between a reasoning item and its item"
        assert entries[after].kind in (Kind.CALL, Kind.ASSISTANT)
        assert all(k not in origins for k in range(origin + 1, after))  # type: ignore[operator]
    for j, entry in enumerate(entries[:-1]):
        following = elements[j + 1]
        if entry.kind is Kind.REASONING and _type(following) in (
                "function_call", "custom_tool_call", "shell_call", "apply_patch_call") \
                or (entry.kind is Kind.REASONING and following.get("role") == "assistant"):
            assert j in origins, "a reasoning item right before its call was dropped"


@given(call_steps())
def test_every_count_is_what_the_lists_show(drawn: tuple[list, list]) -> None:
    elements, _ = drawn
    entries = entries_of("responses", elements)
    out = repair(entries)
    made = [out.entries[p] for p in _made(out)]
    left = set(range(len(entries))) - {o for o in out.origins if o is not None}
    reasoning_left = [j for j in left if entries[j].kind is Kind.REASONING]
    notes = [e for e in made if e.kind is Kind.ASSISTANT]
    assert out.cancelled == len(made) - len(notes)
    assert out.dropped_calls == len(notes) and out.notes == 0
    assert out.dropped_reasoning == len(reasoning_left)
    assert out.dropped_results + out.dropped_items + out.dropped_calls == len(left) - len(reasoning_left)
    assert out.ids_removed == sum(1 for e, o in zip(out.entries, out.origins, strict=True)
                                  if o is not None and "id" in entries[o].raw and "id" not in e.raw)
    assert (out.changed == 0) == (out.entries is entries)


def _bytes(entries: Entries) -> list[bytes]:
    return [e.to_bytes() for e in entries]


@example(("responses", _REUSED))
@given(st.sampled_from(("chat", "responses")).flatmap(
    lambda api: st.tuples(st.just(api), chat_steps() if api == "chat" else call_steps())))
def test_the_same_list_repairs_the_same_and_stays_in_front_of_the_next_steps(
        drawn: tuple[str, tuple[list, list]]) -> None:
    api, (elements, more) = drawn
    once = repair(entries_of(api, elements))
    again = repair(entries_of(api, json.loads(json.dumps(elements))))
    assert _bytes(once.entries) == _bytes(again.entries)
    assert repair(once.entries).changed == 0, "what repair sends, it finds nothing to do in"
    later = repair(entries_of(api, [*elements, *more]))
    assert _bytes(later.entries)[:len(once.entries)] == _bytes(once.entries), \
        "the next request's repair changed what this one sent"


@given(chat_steps())
def test_chat_with_legacy_calls_and_reused_ids_is_valid_and_keeps_the_clients_bytes(
        drawn: tuple[list, list]) -> None:
    elements, more = drawn
    entries = entries_of("chat", elements)
    out = repair(entries)
    sent = wire(out.entries)
    rejected = check_chat({"model": "m", "messages": sent})
    assert rejected is None, rejected.body
    for entry, origin in zip(out.entries, out.origins, strict=True):
        if origin is not None:
            assert entry.to_bytes() == entries[origin].to_bytes()
        elif entry.kind is Kind.ASSISTANT:  # a late result moved back is the client's own
            assert content_text(entry) in (INTERRUPTED_NOTE, MOVED_NOTE)
        else:
            assert content_text(entry) == CANCELLED_TEXT
    continued = [*sent, *more]
    if more:
        assert check_chat({"model": "m", "messages": continued}) is None


@given(st.sampled_from(("chat", "responses")).flatmap(
    lambda api: st.tuples(st.just(api), chat_steps() if api == "chat" else call_steps())), st.data())
def test_the_whole_cascade_sends_a_list_upstream_accepts(drawn: tuple[str, tuple[list, list]],
                                                         data: st.DataObject) -> None:
    """Repair, then the cheap stages (collapse folds shell reads too) and the sanitizer, over
    every call kind and reused ids: the projection passes the fake upstream's rules, and a
    stage that reports no change gave back what it took."""
    api, (elements, _) = drawn
    entries = entries_of(api, elements)
    context = data.draw(cascade_contexts(len(elements), compaction=data.draw(st.booleans())))
    result = run_cascade(entries, context)
    sent = wire(result.entries)
    rejected = (check_chat({"model": "m", "messages": sent}) if api == "chat"
                else check_responses({"model": "m", "input": sent}))
    assert rejected is None, rejected.body
    repaired = [r.changed for r in result.reports if r.name == "repair"]
    assert sum(repaired) == repair(entries).changed  # none ran: the list was inert, valid

