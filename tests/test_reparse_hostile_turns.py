"""The delta parse of a thread's next request agrees with a whole parse, whatever the turns do:
shared, edited, truncated, reordered, re-serialized in another style, or damaged."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy import jsonio
from proxy.conversation import Api
from proxy.errors import BadRequest
from proxy.inbound import Inbound, parse_inbound, with_entries
from proxy.reparse import known_of, reparse
from tests.edge_inputs import thread_turns

_APIS = {"chat": Api.CHAT, "responses": Api.RESPONSES}


def _canonical(value: Any) -> bytes:
    return jsonio.dumps(_wide_ints_as_floats(value), sort_keys=True)


def _wide_ints_as_floats(value: Any) -> Any:
    """A copy of `value` with integers beyond 64 bits as floats. orjson reads them as floats,
    the standard library (which parses a body with a lone surrogate) as ints: the same client
    bytes either way, which is what goes upstream (`proxy/outbound.py` reads such fields
    exactly where it writes them). A loop, not a recursion: the turns nest 1,000 levels deep."""
    top: list[Any] = [None]
    work: list[tuple[Any, Any, Any]] = [(value, top, 0)]
    while work:
        item, parent, key = work.pop()
        if isinstance(item, list):
            parent[key] = copy = [None] * len(item)
            work.extend((v, copy, i) for i, v in enumerate(item))
        elif isinstance(item, dict):
            parent[key] = copy = dict.fromkeys(item)
            work.extend((v, copy, k) for k, v in item.items())
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 2 ** 63:
            parent[key] = float(item)
        else:
            parent[key] = item
    return top[0]


def _whole(api: Api, body: bytes) -> Inbound | None:
    try:
        return with_entries(parse_inbound(api, body))
    except BadRequest:
        return None


@settings(max_examples=80)
@given(st.sampled_from(sorted(_APIS)).flatmap(
    lambda api: st.tuples(st.just(api), thread_turns(api, turns=5))))
def test_a_delta_parse_reads_what_a_whole_parse_reads(drawn) -> None:
    name, turns = drawn
    api = _APIS[name]
    previous: Inbound | None = None
    for turn in turns:
        whole = _whole(api, turn.body)
        known = known_of(previous) if previous is not None else None
        delta = reparse(api, turn.body, known) if known is not None else None
        if delta is not None:
            assert whole is not None, (turn.edit, turn.body)  # a delta never accepts bad JSON
            assert _canonical(delta.doc) == _canonical(whole.doc), turn.edit
            assert (delta.model, delta.stream) == (whole.model, whole.stream)
            assert delta.spans is not None and delta.entries is not None
            assert [_canonical(e.raw) for e in delta.entries] == \
                   [_canonical(e.raw) for e in whole.entries or ()]
            for source, element in zip(delta.spans.elements, delta.elements or (), strict=True):
                assert _canonical(jsonio.loads(source)) == _canonical(element)
            # The spans rebuild the body: the list's bytes are where the parser read the list.
            array = b"[" + b",".join(delta.spans.elements) + b"]"
            rebuilt = jsonio.loads(delta.spans.splice(turn.body, array))
            assert _canonical(rebuilt) == _canonical(whole.doc), turn.edit
        previous = delta or whole or previous  # a refused request leaves the thread's last one
