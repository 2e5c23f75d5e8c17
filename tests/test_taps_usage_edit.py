"""What hiding usage changes in a chunk whose JSON comes in several `data:` lines: the `usage`
member and nothing else. Every other line of the event (`id:`, `event:`, comments) stays in
place with its line end, the data lines keep their prefixes, and a `"usage": null` the proxy
caused goes however the chunk is spelled (pretty-printed, spaced), not only as the byte
patterns know it."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.taps import ChatTap
from proxy.sse import SseDecoder, SseEvent
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import USER, _sending

USAGE = {"prompt_tokens": 60000, "completion_tokens": 2, "total_tokens": 60002}
DELTAS = [({"role": "assistant", "content": "Hel"}, None), ({"content": "lo"}, "stop")]


def _doc(delta: dict[str, Any], finish: str | None, usage: Any, usage_first: bool) -> Any:
    head = {"id": "c", "object": "chat.completion.chunk"}
    choices = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return {**head, "usage": usage, **choices} if usage_first else {**head, **choices,
                                                                     "usage": usage}


@st.composite
def _event(draw: st.DrawFn, doc: Any, eol: bytes) -> bytes:
    """`doc` as an event: its JSON spelled one way or another, cut into data lines between
    tokens, other lines among them."""
    text = draw(st.sampled_from([
        lambda d: json.dumps(d, indent=draw(st.integers(0, 2))),  # pretty-printed
        lambda d: json.dumps(d),  # `", "` and `": "`
        lambda d: json.dumps(d, separators=(",", ":"))]))(doc).encode()
    pieces, start = [], 0  # cut where a reader's joining LF is whitespace: after , : { [
    for at, byte in enumerate(text):
        if byte == 0x0A or byte in b",:{[" and draw(st.integers(0, 3)) == 0:
            pieces.append(text[start:at + (byte != 0x0A)])
            start = at + 1
    pieces.append(text[start:])
    lines = []
    for piece in pieces:
        lines.extend(draw(st.lists(st.sampled_from([b"id: 7", b"event: message", b": note"]),
                                   max_size=1)))
        lines.append(draw(st.sampled_from([b"data: ", b"data:"])) + piece)
    return b"".join(line + eol for line in lines) + eol


@st.composite
def streams(draw: st.DrawFn) -> tuple[list[bytes], list[Any]]:
    """A chat stream whose chunks carry `"usage": null`, but the last, which carries the usage
    beside its choices; and each event's JSON."""
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    docs = [_doc(delta, finish, USAGE if finish else None, draw(st.booleans()))
            for delta, finish in DELTAS]
    return [draw(_event(doc, eol)) for doc in docs] + [b"data: [DONE]" + eol + eol], docs


def _others(event: SseEvent) -> list[bytes]:
    """The lines of an event that are not data, with their line ends, in order."""
    lines = event.raw.splitlines(keepends=True)
    return [line for line in lines if not line.startswith(b"data") and line.strip()]


def _events(stream: bytes) -> list[SseEvent]:
    decoder = SseDecoder()
    return [e for e in decoder.feed(stream) + decoder.flush() if e.raw.strip()]


@given(streams(), st.lists(st.integers(0, 4000), max_size=8))
def test_hiding_usage_changes_the_usage_member_alone(stream: tuple[list[bytes], list[Any]],
                                                    cuts: list[int]) -> None:
    events, docs = stream
    sent = b"".join(events)
    bounds = [0, *sorted(c % (len(sent) + 1) for c in cuts), len(sent)]
    tap = ChatTap(hide_usage=True)
    out = b"".join(tap.feed(sent[a:b]) for a, b in zip(bounds, bounds[1:]))
    out += tap.flush()
    assert tap.usage() == USAGE and tap.complete
    before, after = _events(sent), _events(out)
    assert [_others(e) for e in after] == [_others(e) for e in before]
    assert all(new.raw.count(b"data:") <= old.raw.count(b"data:")
               for old, new in zip(before, after, strict=True))
    for old, new, doc in zip(before, after, [*docs, None], strict=True):
        if doc is None:
            assert new.done
            continue
        assert new.json() == {k: v for k, v in doc.items() if k != "usage"}
        # One span of the data cut, no other byte of it changed.
        was, now = bytes(old.data_bytes), bytes(new.data_bytes)
        same = next((n for n in range(len(now)) if was[n] != now[n]), len(now))
        assert was.endswith(now[same:])


@given(streams())
def test_a_client_that_asked_for_usage_gets_every_byte(stream: tuple[list[bytes], list[Any]]
                                                       ) -> None:
    sent = b"".join(stream[0])
    tap = ChatTap(hide_usage=False)
    assert tap.feed(sent) + tap.flush() == sent


MULTILINE = (b'id: 41\nevent: message\ndata: {"id":"c","object":"chat.completion.chunk","choices"'
             b':[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}],\n'
             b'data: "usage":' + orjson.dumps(USAGE) + b'}\n\nid: 42\ndata: [DONE]\n\n')
PRETTY = (b'data: {\ndata:  "id": "c",\ndata:  "object": "chat.completion.chunk",\n'
          b'data:  "choices": [{"index": 0, "delta": {"content": "Hi"}, "finish_reason": "stop"}],'
          b'\ndata:  "usage": null\ndata: }\n\n'
          b'data: {\ndata:  "id": "c",\ndata:  "choices": [],\ndata:  "usage": '
          + orjson.dumps(USAGE) + b'\ndata: }\n\ndata: [DONE]\n\n')


def test_the_proxy_edits_only_the_usage_of_multi_line_chunks(make_upstream,  # noqa: F811
                                                             make_proxy) -> None:
    for sent, shown in [
            (MULTILINE, b'id: 41\nevent: message\ndata: {"id":"c","object":"chat.completion.chunk",'
                        b'"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":"stop"}]}'
                        b'\n\nid: 42\ndata: [DONE]\n\n'),
            (PRETTY, b'data: {\ndata:  "id": "c",\ndata:  "object": "chat.completion.chunk",\n'
                     b'data:  "choices": [{"index": 0, "delta": {"content": "Hi"}, '
                     b'"finish_reason": "stop"}]\ndata: }\n\ndata: [DONE]\n\n')]:
        proxy = make_proxy(make_upstream(_sending(sent)).url)
        got = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                         json={"model": "gpt-4o", "messages": USER, "stream": True})
        assert got.content == shown
        assert proxy.requests()[-1]["usage_input"] == 60000
