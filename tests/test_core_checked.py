"""A check that starts where a passed list ended says what the whole walk says (the walk from
the start is the oracle), whatever the next request does to the last one's entries; and the
whole walk says what repair's pairing says."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Entries, replaced
from proxy.core import repair as repair_module
from proxy.core.checked import CheckedLists, Walk
from proxy.core.repair import repair
from tests.factories import chat, entries_of
from tests.strategies import conversations, interrupted

_WALKS: dict[str, Walk[Any]] = {"chat": repair_module._valid_chat_from,
                                "responses": repair_module._valid_responses_from}
_EMPTY = {"chat": (), "responses": False}
_MEMO_CHECKS = {"chat": repair_module._valid_chat, "responses": repair_module._valid_responses}


def _lists(api: str) -> st.SearchStrategy[list[Any]]:
    legacy = api == "chat"  # lists of deprecated `function_call` steps, whole or damaged
    return (conversations(api) | conversations(api, messy=True) | interrupted(api)
            | conversations(api, messy=True, legacy=legacy) | interrupted(api, legacy=legacy))


def _whole(api: str, entries: Entries) -> bool:
    return _WALKS[api](entries, 0, _EMPTY[api]) is not None


class _Spy:
    """The walk, noting where each check started."""

    def __init__(self, api: str) -> None:
        self.walk = _WALKS[api]
        self.starts: list[int] = []

    def __call__(self, entries: Entries, start: int, state: Any) -> Any:
        self.starts.append(start)
        return self.walk(entries, start, state)


def _extra_items(api: str, ids: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Elements that test the edges: late or stray answers (in chat of both forms, and a
    legacy call); in Responses also server calls, item references and reasoning items."""
    some_id = st.sampled_from([*ids, "call_orphan", "ws_1"])
    if api == "chat":
        name = st.sampled_from(("read_file", "grep"))
        return st.one_of(
            some_id.map(lambda i: {"role": "tool", "tool_call_id": i, "content": "late"}),
            name.map(lambda n: {"role": "function", "name": n, "content": "late"}),
            name.map(lambda n: {"role": "assistant", "content": None,
                                "function_call": {"name": n, "arguments": "{}"}}))
    return st.one_of(
        some_id.map(lambda i: {"type": "function_call_output", "call_id": i, "output": "late"}),
        st.just({"type": "web_search_call", "call_id": "ws_1", "id": "ws_1", "status": "completed"}),
        st.just({"type": "item_reference", "id": "fc_stored"}),
        st.just({"type": "reasoning", "id": "rs_extra", "summary": []}),
        some_id.map(lambda i: {"type": "function_call", "call_id": i, "name": "f", "arguments": "{}"}))


def _call_ids(elements: list[Any]) -> list[str]:
    ids = [c["id"] for e in elements for c in e.get("tool_calls") or ()]
    return ids + [e["call_id"] for e in elements if isinstance(e.get("call_id"), str)]


@st.composite
def _next_request(draw: st.DrawFn, api: str, first: list[Any]) -> list[Any]:
    """What a client may send after `first`: more, an edit, less, a new order, or a mix."""
    out = list(first)
    for _ in range(draw(st.integers(1, 3))):
        move = draw(st.sampled_from(("extend", "edit", "truncate", "reorder", "insert")))
        if move == "extend":
            out += draw(_lists(api))
        elif move == "edit" and out:
            out[draw(st.integers(0, len(out) - 1))] = draw(st.sampled_from(draw(_lists(api)) or [{}]))
        elif move == "truncate":
            out = out[:draw(st.integers(0, len(out)))]
        elif move == "reorder" and len(out) > 1:
            i, j = draw(st.integers(0, len(out) - 1)), draw(st.integers(0, len(out) - 1))
            out[i], out[j] = out[j], out[i]
        elif move == "insert":
            out.insert(draw(st.integers(0, len(out))), draw(_extra_items(api, _call_ids(out))))
    return out


@given(st.sampled_from(("chat", "responses")), st.data())
def test_the_check_says_what_the_whole_walk_says_on_the_next_request(
        api: str, data: st.DataObject) -> None:
    first = data.draw(_lists(api))
    second = data.draw(_next_request(api, first))
    third = data.draw(_next_request(api, second))
    checked, spy = CheckedLists(64, _EMPTY[api]), _Spy(api)
    for elements in (first, second, second, third):  # the same request again starts at its end
        entries = entries_of(api, elements)
        expected = _whole(api, entries)
        assert checked.check(entries, spy) is expected
        assert _MEMO_CHECKS[api](entries) is expected  # the process's own records
        assert (repair(entries).entries is entries) is expected


@given(st.sampled_from(("chat", "responses")), st.data())
def test_the_whole_walk_passes_exactly_what_pairing_leaves_as_it_is(
        api: str, data: st.DataObject) -> None:
    elements = data.draw(_lists(api))
    if data.draw(st.booleans()):
        elements = data.draw(_next_request(api, elements))
    entries = entries_of(api, elements)
    pair = repair_module._pair_chat if api == "chat" else repair_module._pair_responses
    untouched = not entries or repair_module._finish(entries, *pair(entries)).entries is entries
    assert _whole(api, entries) is untouched


@given(st.sampled_from(("chat", "responses")), st.data())
def test_a_request_that_extends_a_valid_one_is_walked_from_where_that_one_ended(
        api: str, data: st.DataObject) -> None:
    first = data.draw(conversations(api))
    more = data.draw(_lists(api))
    checked, spy = CheckedLists(64, _EMPTY[api]), _Spy(api)
    assert checked.check(entries_of(api, first), spy) is _whole(api, entries_of(api, first))
    entries = entries_of(api, first + more)
    assert checked.check(entries, spy) is _whole(api, entries)
    if first and len(more) < 32 and _whole(api, entries_of(api, first)):
        assert spy.starts[-1] == len(first)


def test_a_record_is_not_trusted_when_an_earlier_entry_changed() -> None:
    calls = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]}
    valid = [{"role": "user", "content": "go"}, calls,
             {"role": "tool", "tool_call_id": "c1", "content": "ok"},
             {"role": "user", "content": "next"}]
    checked, spy = CheckedLists(8, ()), _Spy("chat")
    assert checked.check(chat(*valid), spy)
    orphaned = [valid[0], {"role": "assistant", "content": "no calls"}, *valid[2:]]  # same last
    assert not checked.check(chat(*orphaned), spy)
    assert spy.starts == [0, 0]


def test_an_item_reference_in_the_passed_list_lets_a_later_output_answer() -> None:
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
    first = [user, {"type": "item_reference", "id": "fc_stored"}]
    later = {"type": "function_call_output", "call_id": "call_stored", "output": "ok"}
    checked, spy = CheckedLists(8, False), _Spy("responses")
    assert checked.check(entries_of("responses", first), spy)
    assert checked.check(entries_of("responses", [*first, later]), spy)
    assert spy.starts == [0, 2]
    assert not checked.check(entries_of("responses", [user, later]), spy)


def test_entries_without_keys_are_walked_whole() -> None:
    entries = chat({"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"})
    made = (entries[0], replaced(entries[1], entries[1].raw))  # a made entry has no key yet
    checked, spy = CheckedLists(8, ()), _Spy("chat")
    assert checked.check(made, spy) and checked.check(made, spy)
    assert spy.starts == [0, 0] and len(checked) == 0


def test_the_records_are_bounded() -> None:
    checked = CheckedLists(2, ())
    for n in range(5):
        assert checked.check(chat({"role": "user", "content": f"message {n}"}), _WALKS["chat"])
    assert len(checked) == 2
