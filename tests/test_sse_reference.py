"""The SSE decoder against two oracles: a plain WHATWG reading of the whole stream, and the
decoder as it was before its fast path (its code kept here) for oversized events, with the rule
added since: an event given up on at the bound is never held again, its bytes passed on as fed."""

from __future__ import annotations

import re
from itertools import accumulate
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.sse import SseDecoder, SseEvent

_BOM = b"\xef\xbb\xbf"
Seen = tuple[bytes, str | None, str | None, str | None, bool]

# ---------------------------------------------------------------- reference: the whole stream


@dataclass
class _Fields:
    data: list[bytes] | None = None
    event: str | None = None
    id: str | None = None

    def take(self, line: bytes) -> None:
        name, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if name == b"data":
            self.data = [*(self.data or []), value]
        elif name == b"event":
            self.event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            self.id = value.decode("utf-8", "replace")

    def seen(self, raw: bytes) -> Seen:
        data = None if self.data is None else b"\n".join(self.data).decode("utf-8", "replace")
        return (raw, data, self.event, self.id, True)


def reference(stream: bytes, flushed: bool, reads: list[bytes] | None = None) -> list[Seen]:
    """Line by line: a blank line ends an event; a CR last in an unflushed stream is undecided,
    but one that ends a blank line: the event is whole whatever follows. Such a CR last in one
    of the `reads` ends its event there, and an LF first in the next is a line of its own."""
    events: list[Seen] = []
    fields, start, pos, first = _Fields(), 0, 0, True
    ends = {len(stream)} if reads is None else set(accumulate(map(len, reads)))
    for end in re.finditer(rb"\r\n|\r|\n", stream):
        blank = end.start() == pos
        if not flushed and end.group() == b"\r" and end.end() == len(stream) and not blank:
            break
        if blank and end.group() == b"\r\n" and end.start() + 1 in ends:
            events += (fields.seen(stream[start:end.start() + 1]), _Fields().seen(b"\n"))
            fields, start = _Fields(), end.end()
            pos = end.end()
            continue
        line, pos = stream[pos:end.start()], end.end()
        if not line:
            events.append(fields.seen(stream[start:pos]))
            fields, start = _Fields(), pos
            continue
        if first:
            line, first = line.removeprefix(_BOM), False
        fields.take(line)
    if flushed and start < len(stream):
        if pos < len(stream):
            fields.take(stream[pos:].removeprefix(_BOM) if first else stream[pos:])
        events.append(fields.seen(stream[start:]))
    return events


# ---------------------------------------------------------------- oracle: the decoder before

_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class _OldEvent:
    raw: bytes
    data: str | None = None
    event: str | None = None
    id: str | None = None
    complete: bool = True

    @property
    def done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"

    def json(self) -> Any:
        if not self.data:
            return None
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return None


class _OldDecoder:
    def __init__(self, max_event_bytes: int) -> None:
        self._max = max(max_event_bytes, 16)
        self._buf = bytearray()
        self._scan = 0
        self._in_line = False
        self._oversize = False
        self._first_line = True
        self._cr_ended = False
        self._reset()

    def _reset(self) -> None:
        self._data: list[bytes] = []
        self._has_data = False
        self._event: str | None = None
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[_OldEvent]:
        events = []
        if self._cr_ended:  # the event before ended in a read's last CR: this LF is its half
            self._cr_ended = False
            if chunk.startswith(b"\n"):
                events.append(_OldEvent(b"\n"))
                chunk = chunk[1:]
        self._buf += chunk
        events += self._drain(final=False)
        # Past the bound an event is given up on: what comes of it after that is passed on at
        # once (but a trailing CR), never held again.
        if (len(self._buf) > self._max
                or self._oversize and len(self._buf) > self._buf.endswith(b"\r")):
            events.append(self._spill())
        return events

    @property
    def inside_line(self) -> bool:
        return self._in_line or (bool(self._buf) and self._buf[-1] not in b"\r\n")

    def flush(self) -> list[_OldEvent]:
        events = self._drain(final=True)
        if self._buf:
            if self._scan < len(self._buf) and not self._oversize:
                self._line(bytes(self._buf[self._scan:]))
            events.append(self._dispatch(len(self._buf)))
        return events

    def _drain(self, final: bool) -> list[_OldEvent]:
        events = []
        while (match := _EOL.search(self._buf, self._scan)) is not None:
            line = bytes(self._buf[self._scan:match.start()])
            if match.group() == b"\r" and match.end() == len(self._buf) and not final:
                if not line and not self._in_line:  # a blank line's CR: the event is whole
                    events.append(self._dispatch(match.end()))
                    self._cr_ended = True
                break
            if not line and not self._in_line:
                events.append(self._dispatch(match.end()))
                continue
            if not self._oversize:
                self._line(line)
            self._in_line = False
            self._scan = match.end()
        return events

    def _line(self, line: bytes) -> None:
        if self._first_line:
            self._first_line = False
            line = line.removeprefix(_BOM)
        if line.startswith(b":"):
            return
        name, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            self._data.append(value)
            self._has_data = True
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\0" not in value:
            self._id = value.decode("utf-8", "replace")

    def _dispatch(self, end: int) -> _OldEvent:
        raw = bytes(self._buf[:end])
        del self._buf[:end]
        self._scan = 0
        if self._oversize:
            event = _OldEvent(raw, complete=False)
        else:
            data = b"\n".join(self._data).decode("utf-8", "replace") if self._has_data else None
            event = _OldEvent(raw, data, self._event, self._id)
        self._oversize = self._in_line = False
        self._reset()
        return event

    def _spill(self) -> _OldEvent:
        cut = len(self._buf) - (1 if self._buf.endswith(b"\r") else 0)
        self._in_line = self._in_line or cut > self._scan
        raw = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._scan = max(0, self._scan - cut)
        self._oversize = True
        self._reset()
        return _OldEvent(raw, complete=False)


# ---------------------------------------------------------------- streams and chunkings

PIECES = [b"data", b"data:", b"data: ", b"data:  ", b"event: ", b"event:", b"id: ", b"id:", b":",
          b": ping", b"retry: 5", b"x", b" ", b"\0", b"[DONE]", b" [DONE] ", b'{"a":1}', b'"\xff"',
          "é数".encode(), b"\xe6\x95", b"\xff", _BOM, b"\xef\xbb", b"\n", b"\n", b"\n\n", b"\r",
          b"\r\n", b"\r\n\r\n", b"\r\r"]
EVENTS = [b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', b"data: [DONE]\n\n",
          b"event: response.created\ndata: {}\n\n", b"data: a\ndata: b\n\n", b": keep-alive\n\n",
          b"id: 7\ndata:x\n\n", b"\n", b"data: c\r\n\r\n",
          # The two-line shape of Responses events, and its near misses.
          b'event: response.output_text.delta\ndata: {"delta":"x"}\n\n', b"event: \ndata: \n\n",
          b"event: a: b \ndata:  y\n\n", b"event: e\ndata: x\ndata: y\n\n", b"event: e\nid: 1\n\n",
          b"event:e\ndata: x\n\n", b"event: e\ndata:x\n\n", "event: é\ndata: 数\n\n".encode()]

mixed = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=40).map(b"".join),
    st.lists(st.one_of(st.sampled_from(EVENTS), st.sampled_from(PIECES)), max_size=20).map(b"".join),
    st.binary(max_size=200),
)
# Without CR the decoder keeps to its fast path, which a single CR leaves for a while.
streams = st.one_of(mixed, mixed.map(lambda stream: stream.replace(b"\r", b"")))
# Arbitrary cuts, or one read per event as upstreams mostly send them.
cuts = st.one_of(st.lists(st.integers(0, 400), max_size=12), st.none())


def chunked(stream: bytes, cut: list[int] | None) -> list[bytes]:
    if cut is None:
        return re.findall(rb"(?s).*?\n\n|.+", stream)
    bounds = sorted({0, len(stream), *(c % (len(stream) + 1) for c in cut)})
    return [stream[a:b] for a, b in zip(bounds, bounds[1:])]


def seen(event: SseEvent | _OldEvent) -> tuple[Any, ...]:
    return (event.raw, event.data, event.event, event.id, event.complete)


def decoded(decoder: SseDecoder | _OldDecoder, chunks: list[bytes], flushed: bool) -> list[Any]:
    events = [e for chunk in chunks for e in decoder.feed(chunk)]
    return events + decoder.flush() if flushed else events


@given(streams, cuts, st.booleans())
def test_decoder_matches_the_whatwg_reference(stream: bytes, cut: list[int] | None, flushed: bool) -> None:
    reads = chunked(stream, cut)
    events = decoded(SseDecoder(), reads, flushed)
    assert [seen(e) for e in events] == reference(stream, flushed, reads)


# CR line ends only, as some servers send them: no line end waits for a possible LF.
cr_streams = st.one_of(
    mixed.map(lambda stream: stream.replace(b"\n", b"\r")),
    st.lists(st.sampled_from(EVENTS), max_size=8).map(lambda events: b"".join(events).replace(
        b"\r\n", b"\r").replace(b"\n", b"\r")))


@given(cr_streams)
def test_a_cr_stream_split_at_every_byte_dispatches_each_event_at_its_blank_lines_cr(
        stream: bytes) -> None:
    ended, ends, at = reference(stream, False), [], 0  # the events whose blank line came
    for event in ended:
        at += len(event[0])
        ends.append(at)
    decoder, got = SseDecoder(), []
    for n in range(len(stream)):
        got += decoder.feed(stream[n:n + 1])
        # The blank line's CR arrived: its event is out, nothing of it held for the next read.
        assert [seen(e) for e in got] == [e for e, end in zip(ended, ends) if end <= n + 1]
    assert [seen(e) for e in got + decoder.flush()] == reference(stream, True)


@given(streams, cuts, st.booleans(), st.integers(1, 48))
def test_decoder_matches_the_old_one_with_small_limits(stream: bytes, cut: list[int] | None,
                                                      flushed: bool, limit: int) -> None:
    new, old = SseDecoder(limit), _OldDecoder(limit)
    for chunk in chunked(stream, cut):
        assert [seen(e) for e in new.feed(chunk)] == [seen(e) for e in old.feed(chunk)]
        assert new.inside_line == old.inside_line
    if flushed:
        assert [seen(e) for e in new.flush()] == [seen(e) for e in old.flush()]


@given(st.lists(st.sampled_from(PIECES), max_size=12).map(b"".join))
def test_event_data_done_and_json_as_before(data: bytes) -> None:
    raw = b"data: " + data.replace(b"\r", b"").replace(b"\n", b"") + b"\n\n"
    [new], [old] = SseDecoder().feed(raw), _OldDecoder(1 << 20).feed(raw)
    assert (new.data, new.done, new.json()) == (old.data, old.done, old.json())


def test_a_bom_after_the_first_line_is_not_stripped() -> None:
    decoder = SseDecoder()
    events = decoder.feed(b"data: 1\n\n") + decoder.feed(_BOM + b"data: 2\n\n")
    assert [e.data for e in events] == ["1", None]


def test_one_read_per_event_of_several_lines() -> None:
    decoder = SseDecoder()
    reads = [b"data: 0\n\n", b"data: a\ndata: b\n\n", b"event: e\ndata: c\n\n", b"data: d\n\n",
             b"event: f: g\ndata: \n\n", b"event: h\ndata: 1\n\nevent: i\ndata: 2\n\n"]
    events = [e for read in reads for e in decoder.feed(read)]
    assert [(e.raw, e.data, e.event) for e in events] == [
        (b"data: 0\n\n", "0", None), (b"data: a\ndata: b\n\n", "a\nb", None),
        (b"event: e\ndata: c\n\n", "c", "e"), (b"data: d\n\n", "d", None),
        (b"event: f: g\ndata: \n\n", "", "f: g"), (b"event: h\ndata: 1\n\n", "1", "h"),
        (b"event: i\ndata: 2\n\n", "2", "i")]


def test_blank_lines_after_an_event_are_events_of_their_own() -> None:
    events = SseDecoder().feed(b"data: 1\n\n\n\n\ndata: 2\n\n\n")
    assert [e.raw for e in events] == [b"data: 1\n\n", b"\n", b"\n", b"\n", b"data: 2\n\n", b"\n"]


def test_invalid_utf8_json_still_parses_through_its_text() -> None:
    [event] = SseDecoder().feed(b'data: "\xff"\n\n')
    assert event.json() == "\ufffd"


def test_done_with_unicode_whitespace() -> None:
    [event] = SseDecoder().feed("data: \u00a0[DONE]\u2003\n\n".encode())
    assert event.done and event.json() is None


def test_the_two_line_short_way_takes_its_shape_only() -> None:
    """Reads a property seldom draws: the first event of the stream in the two-line shape (a
    BOM later is no stream start), and two-line events whose second line is not `data:`."""
    for reads in ([b"event: a\ndata: 1\n\nevent: b\ndata: 2\n\n", _BOM + b"data: 3\n\n"],
                  [b"event: a\ndata: 1\n\n", _BOM + b"data: 3\n\n"],
                  [b"data: 0\n\n", b"event: e\nid: 1\n\n", b"event: e\n: c\n\n",
                   b"event: e\nretry: 1\n\nevent: f\nid: 2\n\n", b"event: f\ndata: 4\n\n"]):
        decoder = SseDecoder()
        events = [e for read in reads for e in decoder.feed(read)]
        assert [seen(e) for e in events] == reference(b"".join(reads), False)


def test_the_usual_events_take_the_short_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """The shapes streams send for every token, a whole event or several per read, never reach
    the line-by-line way (the properties see the events, not which way made them)."""
    decoder = SseDecoder()
    decoder.feed(b"data: 0\n\n")  # the stream's first line, which may start with a BOM

    def general(*args: object) -> None:
        raise AssertionError("the general way")

    monkeypatch.setattr(SseDecoder, "_block", general)
    monkeypatch.setattr(SseDecoder, "_feed_general", general)
    reads = [b"data: 1\n\n", b"event: e\ndata: 2\n\n",
             b"event: e\ndata: 3\n\nevent: f\ndata: 4\n\ndata: 5\n\n"]
    events = [event for read in reads for event in decoder.feed(read)]
    assert [(e.raw, e.event, e.data) for e in events] == [
        (b"data: 1\n\n", None, "1"), (b"event: e\ndata: 2\n\n", "e", "2"),
        (b"event: e\ndata: 3\n\n", "e", "3"), (b"event: f\ndata: 4\n\n", "f", "4"),
        (b"data: 5\n\n", None, "5")]
