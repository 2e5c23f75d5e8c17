"""The chat tap in every SSE framing a server may use, split at any bytes: the client that did
not ask for usage never sees the usage chunk the proxy asked for and gets every other byte as
sent (less the `"usage":null` keys); the client that asked gets the upstream's bytes exactly."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.taps import ChatTap

BOM = b"\xef\xbb\xbf"
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _json(choices: list[Any], usage: Any = None) -> bytes:
    return orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                         "model": "m", "choices": choices, "usage": usage})


BODIES = [_json([{"index": 0, "delta": {"role": "assistant", "content": ""}}]),
          _json([{"index": 0, "delta": {"content": "Hel"}}]),
          _json([{"index": 0, "delta": {"content": "lo"}, "finish_reason": "stop"}])]


@st.composite
def framed(draw: st.DrawFn) -> tuple[list[bytes], int]:
    """A stream's events, each framed as a server may, and which one is the usage chunk."""
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    field = draw(st.sampled_from([b"data: ", b"data:"]))
    events = []
    for body in [*BODIES, _json([], USAGE), b"[DONE]"]:
        head = b": keep-alive" + eol if draw(st.booleans()) else b""
        if draw(st.booleans()):
            head += b"event: message" + eol
        events.append(head + field + body + eol + eol)
    if draw(st.booleans()):
        events.insert(draw(st.integers(0, len(events))), b":" + eol + eol)
    if draw(st.booleans()):
        events[0] = BOM + events[0]
    return events, events.index(next(e for e in events if b'"choices":[]' in e))


def _relayed(tap: ChatTap, stream: bytes, cuts: list[int]) -> bytes:
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    out = b"".join(tap.feed(stream[a:b]) for a, b in zip(bounds, bounds[1:], strict=False))
    assert not tap.cut_inside_line()
    return out + tap.flush()


@given(framed(), st.lists(st.integers(0, 10_000), max_size=40))
def test_the_usage_chunk_is_hidden_in_any_framing_and_split(events: tuple[list[bytes], int],
                                                            cuts: list[int]) -> None:
    parts, usage_at = events
    tap = ChatTap(hide_usage=True)
    out = _relayed(tap, b"".join(parts), cuts)
    shown = [p.replace(b',"usage":null', b"") for n, p in enumerate(parts) if n != usage_at]
    assert out == b"".join(shown)
    assert tap.hidden == 1 and tap.complete and tap.usage() == USAGE
    assert tap.response() == {"role": "assistant", "content": "Hello"}


@given(framed(), st.lists(st.integers(0, 10_000), max_size=40))
def test_a_client_that_asked_for_usage_gets_the_upstreams_bytes(events: tuple[list[bytes], int],
                                                                cuts: list[int]) -> None:
    stream = b"".join(events[0])
    tap = ChatTap(hide_usage=False)
    assert _relayed(tap, stream, cuts) == stream
    assert tap.hidden == 0 and tap.complete and tap.usage() == USAGE
