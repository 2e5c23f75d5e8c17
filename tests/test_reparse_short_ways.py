"""The delta parse's short ways (`proxy/reparse.py`) against its general path.

A compact client's turn repeats every element, then ends the list or adds some: one comparison
finds each of those, and must find what the element by element walk finds. A request that repeats the
last one whole (a client's retry, a benchmark) has no new elements: their spans are found
without the element walk, and must be what it finds."""

from __future__ import annotations

import json

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.inbound import parse_inbound, with_entries
from proxy.jsonspan import following_elements, scan_elements
from proxy.jsonspan import skip_ws
from proxy.reparse import _compact_spans, _fresh_spans, _repeated, known_of, reparse


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


def _walk(body: bytes, at: int, sources: list[bytes]) -> tuple[int, int]:
    """`_repeated` element by element, as it was before its short ways."""
    n, count, resume = len(body), 0, at
    for source in sources:
        i = skip_ws(body, resume)
        if not body.startswith(source, i):
            break
        i = skip_ws(body, i + len(source))
        if i >= n:
            break
        if body[i] == ord("]"):
            return count + 1, i
        if body[i] != ord(","):
            break
        after = skip_ws(body, i + 1)
        if after < n and body[after] == ord("]"):
            break
        count, resume = count + 1, i + 1
    return count, resume


_ELEMENTS = [b'{"a":1}', b'{"b":"x"}', b'{"a":1,"b":[]}', b"{}"]
_SEPARATORS = [b",", b", ", b",\n  ", b" ,"]
_TAILS = [b"]", b" ]", b",]", b", ]", b',{"c":2}]', b', {"c":2}]', b",", b"", b"]}", b',{"a":1']


@given(st.lists(st.sampled_from(_ELEMENTS), min_size=1, max_size=5), st.data())
def test_the_repeated_elements_are_found_as_the_walk_finds_them(sources: list[bytes],
                                                                data: st.DataObject) -> None:
    kept = data.draw(st.integers(0, len(sources)))
    sent = sources[:kept] + data.draw(st.lists(st.sampled_from(_ELEMENTS), max_size=2))
    parts = [b"["]
    for k, element in enumerate(sent):
        parts.append((data.draw(st.sampled_from(_SEPARATORS)) if k else b"") + element)
    body = b"".join(parts) + data.draw(st.sampled_from(_TAILS))
    assert _repeated(body, 1, sources) == _walk(body, 1, sources)


_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-2**63, 2**64 - 1)
                       | st.text(max_size=4),
                       lambda inner: st.lists(inner, max_size=2)
                       | st.dictionaries(st.text(max_size=3), inner, max_size=2), max_leaves=5)


@given(st.lists(st.dictionaries(st.text(max_size=3), _VALUES, max_size=3), min_size=1,
                max_size=3), st.lists(st.sampled_from([b",", b", ", b",\n"]), min_size=3,
                                      max_size=3),
       st.sampled_from([b"]", b" ]", b"]}", b",]", b""]), st.booleans())
def test_new_compact_elements_are_located_as_the_element_walk_locates_them(
        fresh: list[dict], separators: list[bytes], tail: bytes, pretty: bool) -> None:
    import json

    dumps = (lambda v: json.dumps(v).encode()) if pretty else orjson.dumps
    parts = [dumps(v) for v in fresh]
    body = b'{"messages":[{"a":1},' + parts[0] + b"".join(
        s + p for s, p in zip(separators, parts[1:])) + tail
    at = len(b'{"messages":[{"a":1},')
    found = following_elements(body, at, fresh, after_element=False)
    walked = None if found is None else (tuple(body[a:b] for a, b in found[0]), found[1])
    compact = _compact_spans(body, at, fresh)
    assert compact is None or compact == walked
    if not pretty and set(separators[:len(fresh) - 1]) <= {b","} and tail.startswith(b"]"):
        assert compact is not None  # the usual turn takes the short way
