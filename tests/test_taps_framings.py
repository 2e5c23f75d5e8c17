"""The chat tap in every SSE framing a server may use, split at any bytes: the client that did
not ask for usage never sees the usage chunk the proxy asked for and gets every other byte as
sent (less the `"usage":null` keys); the client that asked gets the upstream's bytes exactly."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.taps import ChatTap
from proxy.sse import SseDecoder

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


# Usage beside choices: on the chunk that ends the answer (with its `finish_reason`), or on
# every chunk, as some servers send it.
STYLES = ["usage_chunk", "on_the_last", "on_every"]


def _bodies(style: str, usage: Any = USAGE) -> list[bytes]:
    if style == "usage_chunk":
        return [*BODIES, _json([], usage)]
    choices = [orjson.loads(b)["choices"] for b in BODIES]
    return [_json(c, usage if style == "on_every" or n == len(choices) - 1 else None)
            for n, c in enumerate(choices)]


@st.composite
def styled(draw: st.DrawFn) -> tuple[str, list[bytes], list[bytes]]:
    """A stream where usage comes in `style`, each event framed as a server may; and what a
    client that did not ask for usage gets of each event."""
    style = draw(st.sampled_from(STYLES))
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    field = draw(st.sampled_from([b"data: ", b"data:"]))
    events, shown = [], []
    for body, plain in zip([*_bodies(style), b"[DONE]"], [*_bodies(style, None), b"[DONE]"],
                           strict=True):
        head = b": keep-alive" + eol if draw(st.booleans()) else b""
        if draw(st.booleans()):
            head += b"event: message" + eol
        events.append(head + field + body + eol + eol)
        if b'"choices":[]' not in body:
            shown.append(head + field + plain.replace(b',"usage":null', b"") + eol + eol)
    if draw(st.booleans()):
        events[0], shown[0] = BOM + events[0], BOM + shown[0]
    return style, events, shown


@given(styled(), st.lists(st.integers(0, 10_000), max_size=40))
def test_usage_beside_choices_is_read_and_not_shown_in_any_framing(
        stream: tuple[str, list[bytes], list[bytes]], cuts: list[int]) -> None:
    style, events, shown = stream
    tap = ChatTap(hide_usage=True)
    assert _relayed(tap, b"".join(events), cuts) == b"".join(shown)
    assert tap.complete and tap.usage() == USAGE and tap.hidden > 0
    assert tap.response() == {"role": "assistant", "content": "Hello"}


@given(styled(), st.lists(st.integers(0, 10_000), max_size=40))
def test_usage_beside_choices_reaches_a_client_that_asked_for_it_as_sent(
        stream: tuple[str, list[bytes], list[bytes]], cuts: list[int]) -> None:
    sent = b"".join(stream[1])
    tap = ChatTap(hide_usage=False)
    assert _relayed(tap, sent, cuts) == sent and tap.usage() == USAGE


@given(st.sampled_from(STYLES), st.sampled_from([b"\n", b"\r\n", b"\r"]))
def test_usage_beside_choices_in_data_of_several_lines_is_not_shown(style: str,
                                                                    eol: bytes) -> None:
    # A chunk's JSON may come in several `data:` lines, which a reader joins with a line feed.
    events = [b"data: " + body.replace(b'"choices":', b'"choices":' + eol + b"data: ") + eol + eol
              for body in _bodies(style)]
    tap = ChatTap(hide_usage=True)
    out = _relayed(tap, b"".join(events) + b"data: [DONE]" + eol + eol, [])
    chunks = [e.json() for e in SseDecoder().feed(out) if e.data_bytes and not e.done]
    # As a chunk the proxy did not ask usage for: the `"usage": null`s go too, where they can.
    without = [{k: v for k, v in orjson.loads(b).items() if k != "usage"}
               for b in _bodies(style, None) if b'"choices":[]' not in b]
    assert [{k: v for k, v in c.items() if k != "usage" or v is not None}
            for c in chunks] == without
    assert tap.usage() == USAGE
