"""Parsing a thread's next request as a delta of its previous one (`proxy/reparse.py`).

The delta parse must agree with the whole-body parse on every body it accepts (same document,
same elements, same byte spans) and accept nothing the whole-body parse would refuse.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.inbound import Inbound, parse_inbound, with_entries
from proxy.reparse import Known, known_of, reparse
from tests.strategies import conversations

STYLES = {
    "compact": lambda doc: json.dumps(doc, separators=(",", ":"), ensure_ascii=False),
    "spaced": lambda doc: json.dumps(doc, ensure_ascii=False),
    "indented": lambda doc: json.dumps(doc, indent=2),
}


def whole(api: Api, body: bytes, known: Known | None = None) -> Inbound:
    return with_entries(parse_inbound(api, body), known.entries if known else ())


def known_for(api: Api, body: bytes) -> Known:
    known = known_of(whole(api, body))
    assert known is not None
    return known


def assert_same_as_whole(api: Api, body: bytes, delta: Inbound) -> None:
    full = whole(api, body)
    assert delta.doc == full.doc == json.loads(body)
    assert delta.elements == full.elements
    assert delta.spans == full.spans and type(delta.spans) is type(full.spans)
    assert delta.model == full.model and delta.stream == full.stream
    assert [e.source for e in delta.entries or ()] == [e.source for e in full.entries or ()]
    assert [e.raw for e in delta.entries or ()] == [e.raw for e in full.entries or ()]


def request(api: Api, elements: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    key = "messages" if api is Api.CHAT else "input"
    return {"model": "gpt-4o", key: elements, **fields}


@given(st.sampled_from([Api.CHAT, Api.RESPONSES]).flatmap(
    lambda api: st.tuples(st.just(api), conversations(api=api.value))),
    st.sampled_from(sorted(STYLES)), st.data())
def test_a_grown_conversation_parses_as_its_delta(case: tuple[Api, list[dict[str, Any]]],
                                                   style: str, data: st.DataObject) -> None:
    api, elements = case
    cut = data.draw(st.integers(1, len(elements)))
    tail = {"stream": data.draw(st.booleans()), "tools": [{"type": "function", "name": "x"}]}
    dump = STYLES[style]
    first = dump(request(api, elements[:cut], **tail)).encode()
    second = dump(request(api, elements, **tail)).encode()
    known = known_for(api, first)
    delta = reparse(api, second, known)
    assert delta is not None
    assert_same_as_whole(api, second, delta)
    assert delta.entries is not None
    assert all(a is b for a, b in zip(delta.entries[:cut], known.entries, strict=True))


@given(st.sampled_from([Api.CHAT, Api.RESPONSES]).flatmap(
    lambda api: st.tuples(st.just(api), conversations(api=api.value))), st.data())
def test_any_edit_after_the_lead_is_refused_or_parsed_exactly(
        case: tuple[Api, list[dict[str, Any]]], data: st.DataObject) -> None:
    api, elements = case
    first = orjson.dumps(request(api, elements))
    known = known_for(api, first)
    lead = len(known.lead)
    at = data.draw(st.integers(lead, len(first)))
    size = data.draw(st.integers(0, 8))
    insert = data.draw(st.sampled_from([b"", b",", b"]", b"}", b" ", b'"', b"{}", b"[]", b"1",
                                        b',{"role":"user","content":"x"}']))
    second = first[:at] + insert + first[at + size:]
    delta = reparse(api, second, known)
    if delta is None:
        return
    assert_same_as_whole(api, second, delta)


@pytest.mark.parametrize("second", [
    b'{"model":"m","messages":[{"role":"user","content":"a"},]}',  # trailing comma
    b'{"model":"m","messages":[{"role":"user","content":"a"}',  # cut short
    b'{"model":"m","messages":[{"role":"user","content":"a"},7]}',  # not an object
    b'{"model":"m","messages":[{"role":"user","content":"a"}{"role":"user"}]}',  # no comma
    b'{"model":"x","messages":[{"role":"user","content":"a"}]}',  # another lead
    # a later copy of the key is the one a parser keeps
    b'{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"c"}],'
    b'"messages":[{"role":"user","content":"c"}]}',
])
def test_what_the_whole_parse_would_refuse_or_read_otherwise_is_left_to_it(second: bytes) -> None:
    known = known_for(Api.CHAT, b'{"model":"m","messages":[{"role":"user","content":"a"}]}')
    assert reparse(Api.CHAT, second, known) is None


@pytest.mark.parametrize("second", [
    b'{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},]}',
    b'{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"b"},\n]}',
    b'{"model":"m","messages":[{"role":"user","content":"a"},{"role":"user","content":"B"},]}',
    b'{"model":"m","messages":[{"role":"user","content":"a"},]}',
])
def test_a_trailing_comma_after_repeated_elements_is_left_to_the_whole_parse(second: bytes) -> None:
    known = known_for(Api.CHAT, b'{"model":"m","messages":[{"role":"user","content":"a"},'
                                b'{"role":"user","content":"b"}]}')
    assert reparse(Api.CHAT, second, known) is None
    with pytest.raises(ValueError):
        json.loads(second)


def test_an_edited_early_message_reuses_only_what_precedes_it() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                {"role": "assistant", "content": "b"}]
    known = known_for(Api.CHAT, orjson.dumps(request(Api.CHAT, messages)))
    edited = [messages[0], {"role": "user", "content": "A"}, *messages[2:],
              {"role": "user", "content": "c"}]
    body = orjson.dumps(request(Api.CHAT, edited))
    delta = reparse(Api.CHAT, body, known)
    assert delta is not None and delta.entries is not None
    assert delta.entries[0] is known.entries[0]
    assert delta.entries[1] is not known.entries[1]
    assert delta.entries[2] is known.entries[2]  # the same bytes at the same place again
    assert_same_as_whole(Api.CHAT, body, delta)


def test_fields_after_the_list_come_from_the_new_body() -> None:
    messages = [{"role": "user", "content": "a"}]
    known = known_for(Api.CHAT, orjson.dumps({"model": "m", "messages": messages, "stream": False}))
    body = orjson.dumps({"model": "m", "messages": [*messages, {"role": "assistant", "content": "b"}],
                         "stream": True, "temperature": 0.2})
    delta = reparse(Api.CHAT, body, known)
    assert delta is not None and delta.stream is True and delta.doc["temperature"] == 0.2
    assert_same_as_whole(Api.CHAT, body, delta)


def test_another_api_or_a_list_that_shrank_to_nothing_is_not_a_delta() -> None:
    known = known_for(Api.CHAT, b'{"model":"m","messages":[{"role":"user","content":"a"}]}')
    assert reparse(Api.RESPONSES, b'{"model":"m","messages":[{"role":"user","content":"a"}]}',
                   known) is None
    assert reparse(Api.CHAT, b'{"model":"m","messages":[]}', known) is None


def test_new_elements_that_orjson_refuses_are_parsed_and_located_all_the_same() -> None:
    first = b'{"model":"m","messages":[{"role":"user","content":"a"}]}'
    known = known_for(Api.CHAT, first)
    second = (b'{"model":"m","messages":[{"role":"user","content":"a"},'
              b'{"role":"user","content":"\\ud800 lone","n":123456789012345678901234567890}]}')
    delta = reparse(Api.CHAT, second, known)
    assert delta is not None and delta.reused == 1
    assert_same_as_whole(Api.CHAT, second, delta)
