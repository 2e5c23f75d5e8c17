"""An event that grows past the decoder's bound is given up on, not held: from then on its bytes
pass on as they come, the decoder keeping at most a trailing CR (half of a CRLF, perhaps), and
the events after it are read as usual. Through the chat tap the client still gets every byte but
the usage chunk it did not ask for, the oversized event's bytes untouched, and the tap knows the
answer was not read whole."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.taps import ChatTap, ResponsesTap
from proxy.sse import SseDecoder

BOUND = 1024
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def _fed(decoder: SseDecoder, stream: bytes, read: int) -> list[tuple[list, int, bool]]:
    """Each read's events, with what the decoder held after it and whether it was skipping."""
    steps = []
    for start in range(0, len(stream), read):
        events = decoder.feed(stream[start:start + read])
        steps.append((events, decoder.held, decoder.skipping))
    return steps


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
@pytest.mark.parametrize("read", [7, 100, 300])
@pytest.mark.parametrize("shape", ["one line", "many lines"])
def test_an_event_past_the_bound_is_passed_on_as_it_comes(eol: bytes, read: int,
                                                          shape: str) -> None:
    line = b"data: " + b"x" * (20 * BOUND) + eol
    big = (line if shape == "one line" else (b"data: " + b"y" * 200 + eol) * 100) + eol
    stream = b"data: 1" + eol + eol + big + b"data: 2" + eol + eol
    decoder = SseDecoder(BOUND)
    steps = _fed(decoder, stream, read)
    events = [e for step in steps for e in step[0]] + decoder.flush()
    assert b"".join(e.raw for e in events) == stream
    # (A CRLF split after a blank line's CR: its LF comes as an event of its own, with no data.)
    assert [e.data for e in events if e.complete and e.raw != b"\n"] == ["1", "2"]
    # Giving up waits for the bound; past it, nothing more of that event stays in memory.
    assert max(held for _, held, _ in steps) <= BOUND + read
    skipping = [held for _, held, skips in steps if skips]
    assert skipping and max(skipping) <= 1


def test_an_endless_line_is_never_held_once_given_up() -> None:
    decoder = SseDecoder(BOUND)
    steps = _fed(decoder, b"data: {" + b"x" * (200 * BOUND), 100)
    assert all(held <= 1 for _, held, skips in steps if skips)
    assert sum(len(e.raw) for step in steps for e in step[0]) >= 200 * BOUND
    assert decoder.held == 0 and decoder.inside_line and decoder.flush() == []


def _chunk(choices: list, usage: object = None) -> bytes:
    return b"data: " + orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                                     "model": "m", "choices": choices, "usage": usage}) + b"\n\n"


def _text(content: str, finish: str | None = None) -> list:
    return [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]


OPENING = _chunk([{"index": 0, "delta": {"role": "assistant", "content": "Hel"}}])
CLOSING = _chunk(_text("lo", "stop"))
USAGE_CHUNK = _chunk([], USAGE)


@given(st.integers(0, 3), st.sampled_from([b"\n\n", b"\r\n\r\n"]),
       st.lists(st.integers(1, 700), min_size=1, max_size=30))
def test_the_usage_chunk_stays_hidden_after_the_tap_gave_up_on_an_event(
        where: int, eol: bytes, reads: list[int]) -> None:
    big = _chunk(_text("x" * (5 * BOUND))).replace(b"\n\n", eol)
    parts = [OPENING, CLOSING, USAGE_CHUNK, b"data: [DONE]\n\n"]
    parts.insert(where, big)
    stream = b"".join(parts)
    tap = ChatTap(hide_usage=True)
    tap.decoder = SseDecoder(BOUND)
    out, start, n = [], 0, 0
    while start < len(stream):
        read = reads[n % len(reads)]
        out.append(tap.feed(stream[start:start + read]))
        assert tap.decoder.held <= (1 if tap.decoder.skipping else BOUND + read)
        start, n = start + read, n + 1
    out.append(tap.flush())
    # Every byte but the hidden usage chunk, the oversized event's as sent (with its null usage:
    # it is not read, so not edited), the others without the `"usage":null` the proxy asked for.
    shown = [p if p is big else p.replace(b',"usage":null', b"") for p in parts
             if p is not USAGE_CHUNK]
    assert b"".join(out) == b"".join(shown)
    assert tap.hidden == 1 and tap.unread == "event_too_large"


def test_a_tap_that_read_every_event_has_nothing_unread() -> None:
    chat, responses = ChatTap(hide_usage=True), ResponsesTap()
    chat.feed(OPENING + CLOSING + USAGE_CHUNK)
    responses.feed(b'event: response.created\ndata: {"type": "response.created"}\n\n')
    assert chat.unread is None and responses.unread is None
