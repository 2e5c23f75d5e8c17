"""A check that starts where a passed list ended says what the whole walk says (the walk from
the start is the oracle), whatever the next request does to the last one's entries."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, replaced
from proxy.core import repair as repair_module
from proxy.core.checked import CheckedLists
from proxy.core.repair import repair
from tests.factories import chat
from tests.strategies import conversations, interrupted

_walk = repair_module._valid_chat_from  # the plain walk over the whole list

chat_lists = conversations("chat") | conversations("chat", messy=True) | interrupted("chat")


class _Spy:
    """`_walk`, noting where each check started."""

    def __init__(self) -> None:
        self.starts: list[int] = []

    def __call__(self, entries: Entries, start: int) -> bool:
        self.starts.append(start)
        return _walk(entries, start)


@st.composite
def _next_request(draw: st.DrawFn, first: list[Any]) -> list[Any]:
    """What a client may send after `first`: more, an edit, less, a new order, or a mix."""
    out = list(first)
    for _ in range(draw(st.integers(1, 3))):
        move = draw(st.sampled_from(("extend", "edit", "truncate", "reorder", "insert")))
        if move == "extend":
            out += draw(chat_lists)
        elif move == "edit" and out:
            out[draw(st.integers(0, len(out) - 1))] = draw(st.sampled_from(draw(chat_lists) or [{}]))
        elif move == "truncate":
            out = out[:draw(st.integers(0, len(out)))]
        elif move == "reorder" and len(out) > 1:
            i, j = draw(st.integers(0, len(out) - 1)), draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
        elif move == "insert":
            out.insert(draw(st.integers(0, len(out))),
                       {"role": "tool", "tool_call_id": draw(st.sampled_from(
                           [*_call_ids(out), "call_orphan"])), "content": "late"})
    return out


def _call_ids(elements: list[Any]) -> list[str]:
    return [c["id"] for e in elements for c in e.get("tool_calls") or ()]


@given(st.data())
def test_the_check_says_what_the_whole_walk_says_on_the_next_request(data: st.DataObject) -> None:
    first = data.draw(chat_lists)
    second = data.draw(_next_request(first))
    checked, spy = CheckedLists(64), _Spy()
    for elements in (first, second, second):  # the same request again resumes at its very end
        entries = chat(*elements)
        expected = _walk(entries, 0)
        assert checked.check(entries, spy) is expected
        assert repair_module._valid_chat(entries) is expected  # the process's own memo
        assert (repair(entries).entries is entries) is expected


@given(st.data())
def test_a_request_that_extends_a_valid_one_is_walked_from_where_that_one_ended(
        data: st.DataObject) -> None:
    first = data.draw(conversations("chat"))
    more = data.draw(conversations("chat", messy=True))
    checked, spy = CheckedLists(64), _Spy()
    assert checked.check(chat(*first), spy)
    entries = chat(*first, *more)
    assert checked.check(entries, spy) is _walk(entries, 0)
    if first and len(more) < 32:
        assert spy.starts[-1] == len(first)


def test_a_record_is_not_trusted_when_an_earlier_entry_changed() -> None:
    calls = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
    valid = [{"role": "user", "content": "go"}, calls,
             {"role": "tool", "tool_call_id": "c1", "content": "ok"},
             {"role": "user", "content": "next"}]
    checked, spy = CheckedLists(8), _Spy()
    assert checked.check(chat(*valid), spy)
    orphaned = [valid[0], {"role": "assistant", "content": "no calls"}, *valid[2:]]  # same last
    assert not checked.check(chat(*orphaned), spy)
    assert spy.starts == [0, 0]


def test_entries_without_keys_are_walked_whole() -> None:
    entries = chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    made = (entries[0], replaced(entries[1], entries[1].raw))  # a made entry has no key yet
    checked, spy = CheckedLists(8), _Spy()
    assert checked.check(made, spy) and checked.check(made, spy)
    assert spy.starts == [0, 0] and len(checked) == 0


def test_the_records_are_bounded() -> None:
    checked = CheckedLists(2)
    for n in range(5):
        assert checked.check(chat({"role": "user", "content": f"message {n}"}), _walk)
    assert len(checked) == 2
