"""Finding the message list in a body and splicing a new one in, bytes preserved elsewhere."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.conversation import Api, entry_from_chat, make_user
from proxy.inbound import parse_inbound, with_entries
from proxy.jsonspan import locate_array
from proxy.outbound import build_body

_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20),
                  st.floats(allow_nan=False, allow_infinity=False))
_json = st.recursive(_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=10)
_message = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant"]),
     "content": st.text(max_size=60)},
    optional={"name": st.text(min_size=1, max_size=8), "extra": _json})


@st.composite
def bodies(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    doc = {"model": "m", "messages": draw(st.lists(_message, min_size=1, max_size=8))}
    doc.update(draw(st.dictionaries(st.text(min_size=1, max_size=6).filter(
        lambda k: k not in ("model", "messages")), _json, max_size=3)))
    # A decoy: the same messages nested elsewhere must not be taken for the real list.
    if draw(st.booleans()):
        doc = {"metadata": {"messages": doc["messages"]}, **doc}
    style = draw(st.sampled_from(["compact", "spaced", "indented", "ascii"]))
    if style == "compact":
        body = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif style == "spaced":
        body = json.dumps(doc, ensure_ascii=False)
    elif style == "indented":
        body = json.dumps(doc, indent=3, ensure_ascii=False)
    else:
        body = json.dumps(doc)
    return doc, body.encode()


@given(bodies())
def test_elements_are_the_clients_bytes(case: tuple[dict[str, Any], bytes]) -> None:
    doc, body = case
    spans = locate_array(body, "messages", doc["messages"])
    assert spans is not None
    assert [json.loads(e) for e in spans.elements] == doc["messages"]
    assert all(e in body for e in spans.elements)
    rebuilt = spans.splice(body, b"[" + b",".join(spans.elements) + b"]")
    assert json.loads(rebuilt) == doc


@given(bodies(), st.data())
def test_hints_from_an_earlier_request_find_the_same_elements(
        case: tuple[dict[str, Any], bytes], data: st.DataObject) -> None:
    doc, body = case
    spans = locate_array(body, "messages", doc["messages"])
    assert spans is not None
    hints = list(spans.elements)
    if hints and data.draw(st.booleans()):
        hints[data.draw(st.integers(0, len(hints) - 1))] = b'{"role":"user","content":"edited"}'
    again = locate_array(body, "messages", doc["messages"], hints)
    assert again is not None and again.elements == spans.elements


_BEYOND_64_BITS = (b'{"model":"m","messages":[{"role":"system","content":""},'
                   b'{"role":"user","content":"","extra":-9223372036854775809}]}')


@given(bodies(), st.integers(0, 7))
@example((json.loads(_BEYOND_64_BITS), _BEYOND_64_BITS), 0)
def test_a_new_list_changes_only_the_list(case: tuple[dict[str, Any], bytes], drop: int) -> None:
    doc, body = case
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    assert inbound.entries is not None
    entries = list(inbound.entries)
    del entries[drop % len(entries)]
    entries.append(make_user(Api.CHAT, "added by the proxy"))
    out = build_body(inbound, tuple(entries), include_usage=False)
    parsed = json.loads(out)
    # Each message as its bytes say (a client's untouched message keeps an integer beyond 64
    # bits that orjson's parse, `e.raw`, would have turned into a float).
    assert parsed["messages"] == [json.loads(e.to_bytes()) for e in entries]
    assert {k: v for k, v in parsed.items() if k != "messages"} == \
        {k: v for k, v in doc.items() if k != "messages"}
    spans = inbound.spans
    assert spans is not None
    assert out.startswith(body[:spans.start]) and out.endswith(body[spans.end:])


def test_an_unchanged_list_is_the_body_itself() -> None:
    body = b'{"model": "m",  "messages": [ {"role": "user", "content": "hi"} ], "x": 1.50}'
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    assert build_body(inbound, inbound.entries, include_usage=False) is body


def test_usage_request_is_inserted_without_touching_the_rest() -> None:
    body = b'{ "model":"m","stream":true,"messages":[{"role":"user","content":"hi"}],"n":1.10}'
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    out = build_body(inbound, inbound.entries, include_usage=True)
    assert out == b'{"stream_options":{"include_usage":true}, "model":"m","stream":true,' \
                  b'"messages":[{"role":"user","content":"hi"}],"n":1.10}'


def test_existing_stream_options_are_extended() -> None:
    body = (b'{"model":"m","stream":true,"stream_options":{"include_obfuscation":false},'
            b'"messages":[{"role":"user","content":"hi"}]}')
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    out = json.loads(build_body(inbound, inbound.entries, include_usage=True))
    assert out["stream_options"] == {"include_obfuscation": False, "include_usage": True}
    assert out["messages"] == [{"role": "user", "content": "hi"}]


def test_json_orjson_refuses_still_round_trips() -> None:
    body = ('{"model":"m","big":123456789012345678901234567890,'
            '"messages":[{"role":"user","content":"\\ud800 lone"}]}').encode()
    inbound = with_entries(parse_inbound(Api.CHAT, body))
    assert inbound.entries is not None
    changed = (*inbound.entries, entry_from_chat({"role": "user", "content": "more"}))
    out = build_body(inbound, changed, include_usage=False)
    assert json.loads(out)["big"] == 123456789012345678901234567890
    assert json.loads(out)["messages"][0]["content"] == "\ud800 lone"
