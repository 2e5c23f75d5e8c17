"""The delta parse's short ways (`proxy/reparse.py`) against its general path.

A request that repeats the last one whole (a client's retry, a benchmark) has no new
elements: their spans are found without the element walk, and must be what it finds."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.inbound import parse_inbound, with_entries
from proxy.jsonspan import following_elements, scan_elements
from proxy.reparse import _fresh_spans, known_of, reparse


def _general(body: bytes, at: int) -> tuple[tuple[bytes, ...], int] | None:
    found = following_elements(body, at, [], after_element=False)
    if found is not None:
        return tuple(body[a:b] for a, b in found[0]), found[1]
    scanned = scan_elements(body, at)
    if scanned is None or scanned[0]:
        return None
    return tuple(scanned[0]), scanned[1]


@given(st.binary(max_size=12).map(lambda tail: b'{"messages":[' + tail),
       st.integers(0, 30))
def test_no_new_elements_are_located_as_the_element_walk_locates_them(body: bytes,
                                                                      at: int) -> None:
    at = min(at, len(body))
    assert _fresh_spans(body, at, []) == _general(body, at)


@given(st.lists(st.text(max_size=5), min_size=1, max_size=4),
       st.sampled_from(["", " ", "\n  "]))
def test_a_repeated_request_parses_as_the_whole_body_does(texts: list[str], space: str) -> None:
    doc = {"model": "m", "messages": [{"role": "user", "content": t} for t in texts]}
    body = json.dumps(doc, separators=(",", ":")).encode()
    body = body[:-2] + space.encode() + body[-2:]  # whitespace before the list's `]`
    known = known_of(with_entries(parse_inbound(Api.CHAT, body)))
    assert known is not None
    delta = reparse(Api.CHAT, body, known)
    full = with_entries(parse_inbound(Api.CHAT, body))
    assert delta is not None
    assert delta.doc == full.doc == orjson.loads(body)
    assert delta.spans == full.spans and delta.elements == full.elements
    assert delta.reused == len(texts)
