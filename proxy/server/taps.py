"""Stream taps for the pipeline: forward complete events as they arrive, read the answer on the side.

The chat tap can hide the usage the proxy asked for on the client's behalf (SPEC §6): the
usage-only chunk, and the `usage` member of a chunk that carries it beside its choices;
both taps rebuild the response (message or output items) and its usage for the anchor, and
know how to end a broken stream with an error the client's SDK raises.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from operator import itemgetter
from typing import Any

import orjson

from proxy.errors import error_body
from proxy.jsonspan import skip_ws
from proxy.sse import SseDecoder, SseEvent
from proxy.streams import ChatStream, ChunkKind, ResponsesStream


_RAW = itemgetter(0)  # an SseEvent's `raw`: the tuple's first field, read in C
# What a tap rebuilds of the answer is measured each time this many more bytes were relayed (a
# chat answer's text comes a token a chunk, the chunk ~50 times its text), and forgotten past
# `_ANSWER_CHARS`: the longest real answer's text is under 1 MB (128,000 tokens, the largest
# output limit), so 64 Mi characters leave room for many choices (`n`) of that.
_MEASURE_EVERY = 16 * 1024 * 1024
_ANSWER_CHARS = 64 * 1024 * 1024


class _EventTap:
    """What both taps share: events decoded as they come, and the end of the stream. (Not an
    ABC: `isinstance` against one runs Python code, and the pipeline tests each stream's tap.)"""

    decoder: SseDecoder
    stream: ChatStream | ResponsesStream
    _held = b""  # the last line, read by `cut_inside_line`, for `flush` to send
    ended = False  # the body ended cleanly (`cut_inside_line` or `flush` was called)
    forwarded = 0  # bytes handed to the relay
    # Why the answer is not known whole, so anchors nothing: `event_too_large`, an event past
    # `SseDecoder`'s bound passed unread; `answer_too_large`, the answer rebuilt past
    # `_ANSWER_CHARS` was forgotten. None: read whole.
    unread: str | None = None
    _open = False  # the body ended inside such an event: the client has its start, not its end
    _measure_at = 0  # `forwarded` at which the rebuilt answer is measured next

    def feed(self, chunk: bytes) -> bytes:
        out = self._forward(self.decoder.feed(chunk))
        self.forwarded += len(out)
        if self.forwarded >= self._measure_at:
            self._measure()
        return out

    def _measure(self) -> None:
        """Keep what the stream rebuilt of the answer bounded, whatever the upstream sends."""
        self._measure_at = self.forwarded + _MEASURE_EVERY
        if not self.stream.forgotten and self.stream.held_chars() > _ANSWER_CHARS:
            self.stream.forget()
            self.unread = self.unread or "answer_too_large"

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        self.ended = True
        out = held + self._forward(self.decoder.flush())
        self.forwarded += len(out)
        return out

    def delivered_whole(self, bytes_out: int) -> bool:
        """Whether a client that had `bytes_out` bytes had the whole answer: its end came, and
        the relay wrote all it was handed (a write that failed may have held that end)."""
        return self.complete and bytes_out >= self.forwarded

    def cut_inside_line(self) -> bool:
        """The body, which ended cleanly, ended inside a line, and what it holds does not
        finish the answer. The held line is read first: it may be the end itself (`data:
        [DONE]`, a Responses `response.completed`) with no line end after it."""
        self.ended = True
        if not self.decoder.inside_line or self.complete:
            return False
        self._open = self.decoder.skipping
        self._held = self._forward(self.decoder.flush())
        return not self.complete

    def _closing(self) -> bytes:
        """What goes before an error frame: a blank line when the client has the start of an
        event too large to hold, passed on as it came, whose end never came. The frame would
        otherwise continue that event's last line, and an SDK would never read it."""
        return b"\n\n" if self._open or self.decoder.skipping else b""

    def ended_early(self) -> bool:
        """The stream, read to its end, ended between events but before the answer's last one.
        False for a chat stream: not every provider ends one with `[DONE]`."""
        return False

    def _forward(self, events: list[SseEvent]) -> bytes:
        """The bytes of `events` the client gets; reads them on the way."""
        raise NotImplementedError

    @property
    def complete(self) -> bool:
        """The answer came to its end (and not as an error)."""
        raise NotImplementedError

    @property
    def over(self) -> bool:
        """The stream said its last event: the answer's end, or its failure."""
        raise NotImplementedError


def left_after_end(tap: object, bytes_out: int) -> bool | None:
    """True when a client that left with `bytes_out` bytes had the whole answer (for its
    request line); None otherwise, or for a tap that reads no answer."""
    return isinstance(tap, _EventTap) and tap.delivered_whole(bytes_out) or None


class ChatTap(_EventTap):
    def __init__(self, hide_usage: bool) -> None:
        self.hide_usage = hide_usage
        self.decoder = SseDecoder()
        self.stream = ChatStream()
        self.hidden = 0
        self._hid_cr = False

    def _forward(self, events: list[SseEvent]) -> bytes:
        out = []
        stream = self.stream
        for event in events:
            if self._hid_cr:
                self._hid_cr = False
                if event.raw == b"\n":  # the second half of the hidden event's CRLF: hidden too
                    continue
            if not event.complete:
                # Unread, so passed on as sent: a `"usage":null` in it may be cut between two
                # pieces, and the proxy edits only what it read.
                self.unread = "event_too_large"
                out.append(event.raw)
                continue
            usage = stream.usage
            kind = stream.feed(event)
            if self.hide_usage:
                if kind is ChunkKind.USAGE_ONLY:
                    self.hidden += 1
                    # Its blank line's CR came last in a read: an LF first in the next comes out
                    # as an event of its own (`SseDecoder`), the rest of this one's line end.
                    self._hid_cr = event.raw.endswith(b"\r")
                    continue
                if stream.usage is not usage:  # a chunk with choices and usage: read, not shown
                    self.hidden += 1
                    out.append(_without_usage(event))
                    continue
                out.append(_without_null_usage(event.raw))
            else:
                out.append(event.raw)
        return b"".join(out)

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        body = error_body(message, "server_error", None, code)
        return self._closing() + b"data: " + orjson.dumps(body) + b"\n\n"

    def response(self) -> Any:
        return self.stream.message()

    def usage(self) -> Any:
        return self.stream.usage

    @property
    def complete(self) -> bool:
        # Not every server ends a chat stream with `[DONE]`: one whose body ended cleanly after
        # every choice's `finish_reason` is whole too.
        stream = self.stream
        return stream.error is None and (stream.done or self.ended and stream.finished)

    @property
    def over(self) -> bool:
        return self.stream.error is not None or self.complete


# With include_usage, every chunk carries `"usage": null` until the last, usually as its last
# key, first on some servers. Inside a JSON string a quote is always escaped, so these bytes
# can only be that key and its null.
_NULL_USAGE = (b',"usage":null', b', "usage": null', b'"usage":null,', b'"usage": null, ')


def _without_null_usage(raw: bytes) -> bytes:
    """A chunk as it would have come had the proxy not asked for usage on the client's behalf."""
    # The usual chunk holds the key once, compact: one replace settles it. `find`, not `in`:
    # see proxy/sse.py. Each pattern holds the key: without it, none matches.
    raw = raw.replace(_NULL_USAGE[0], b"")
    if raw.find(b'"usage"') < 0:
        return raw
    for pattern in _NULL_USAGE[1:]:
        if raw.find(pattern) >= 0:
            raw = raw.replace(pattern, b"")
            if raw.find(b'"usage"') < 0:
                return raw
    # Spelled another way (a chunk pretty-printed over several `data:` lines): read, and cut
    # if it is the top-level member, null. Only such streams come here, once a chunk.
    lines = _data_lines(raw)
    data = b"\n".join([raw[value:end] for _, value, end, _ in lines])
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return raw
    cut = _usage_member(data) if isinstance(doc, dict) and doc.get("usage", 0) is None else None
    return raw if cut is None else _cut_data(raw, lines, cut)


_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\],:]')
_LINE_END = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"


def _without_usage(event: SseEvent) -> bytes:
    """A chunk that carries usage beside its choices (some servers put it on the last chunk,
    or on every one), without its `usage` member; every other byte as sent."""
    raw = event.raw
    lines = _data_lines(raw)
    data = b"\n".join([raw[value:end] for _, value, end, _ in lines])
    if data != event.data_bytes:  # not the decoder's reading (a BOM past the stream's start)
        return raw
    cut = _usage_member(data)
    return raw if cut is None else _cut_data(raw, lines, cut)


def _data_lines(raw: bytes) -> list[tuple[int, int, int, int]]:
    """Each `data:` line of the event `raw`: where it starts, where its value starts and ends,
    and where its line end ends; read as proxy/sse.py reads them."""
    lines: list[tuple[int, int, int, int]] = []
    start = 0
    for match in _LINE_END.finditer(raw):
        end = match.start()
        if end == start:
            break  # the blank line that ends the event
        name = start + 3 if start == 0 and raw.startswith(_BOM) else start
        colon = raw.find(b":", name, end)
        if raw[name:end if colon < 0 else colon] == b"data":
            value = end if colon < 0 else colon + 1 + raw.startswith(b" ", colon + 1, end)
            lines.append((start, value, end, match.end()))
        start = match.end()
    return lines


def _cut_data(raw: bytes, lines: list[tuple[int, int, int, int]], cut: tuple[int, int]) -> bytes:
    """`raw` without the span `cut` of its data (its data `lines` joined with LF). Within one
    line, spliced in place; across lines, the first line's head and the last line's tail make
    one line, where the first was, and the data lines between go. Every other byte and line
    (`id:`, `event:`, comments, line ends) stays as sent."""
    starts: list[int] = []
    at = 0
    for _, value, end, _ in lines:
        starts.append(at)
        at += end - value + 1
    first, last = bisect_right(starts, cut[0]) - 1, bisect_right(starts, cut[1]) - 1
    head = lines[first][1] + cut[0] - starts[first]
    tail = lines[last][1] + cut[1] - starts[last]
    if first == last:
        return raw[:head] + raw[tail:]
    kept = [raw[:head], raw[tail:lines[last][2]], raw[lines[first][2]:lines[first][3]]]
    for before, line in zip(lines[first:last], lines[first + 1:last + 1]):
        kept.append(raw[before[3]:line[0]])  # the lines that are not data, between two
    kept.append(raw[lines[last][3]:])
    return b"".join(kept)


def _usage_member(data: bytes) -> tuple[int, int] | None:
    """The span to cut from a JSON object to drop its top-level `usage` member: the member and
    one comma beside it. None when it has none."""
    depth, start, previous_comma, key_next = 0, -1, -1, False
    for match in _JSON_TOKEN.finditer(data):
        c = match.group()[0]
        if c in b"{[":
            depth += 1
            key_next = depth == 1
        elif c in b"}]":
            depth -= 1
            if depth == 0 and start >= 0:  # the object's end: it was the last member
                return start, _before_space(data, match.start())
        elif depth != 1:
            continue
        elif c == 0x2C:  # ','
            if start >= 0:
                # Not the first member: the comma before it goes; else the one after it, with
                # the spaces after that.
                return ((start, match.start()) if start == previous_comma
                        else (start, skip_ws(data, match.end())))
            previous_comma, key_next = match.start(), True
        elif c == 0x22 and key_next:
            key_next = False
            if start < 0 and orjson.loads(match.group()) == "usage":
                start = previous_comma if previous_comma >= 0 else match.start()
    return None


def _before_space(data: bytes, end: int) -> int:
    while end > 0 and data[end - 1] in b" \t\r\n":
        end -= 1
    return end


class ResponsesTap(_EventTap):
    def __init__(self, resumed: bool = False) -> None:
        self.decoder = SseDecoder()
        self.stream = ResponsesStream()
        # A stream resumed by id (`starting_after`): nothing may be left after that event.
        self.resumed = resumed

    def _forward(self, events: list[SseEvent]) -> bytes:
        for event in events:
            if event.complete:
                self.stream.feed(event)
            else:
                self.unread = "event_too_large"
        return b"".join(map(_RAW, events))

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        body = {"type": "error", "sequence_number": self.stream.sequence + 1,
                **error_body(message, "server_error", None, code)}
        return self._closing() + b"event: error\ndata: " + orjson.dumps(body) + b"\n\n"

    def response(self) -> Any:
        return self.stream.output()

    def usage(self) -> Any:
        return self.stream.usage

    def ended_early(self) -> bool:
        # A Responses stream always ends in a terminal event (PROTOCOL.md §6.3) or an error.
        if self.resumed and self.stream.sequence < 0:
            return False  # no event at all: the client may have had the last one already
        return self.stream.status is None and self.stream.error is None and not self.unread

    @property
    def complete(self) -> bool:
        # `incomplete` (the output limit reached) is an end too: the client keeps that
        # answer, and its usage anchors the next turn as a chat `finish_reason: length` does.
        return self.stream.status in _ENDED

    @property
    def over(self) -> bool:
        return self.stream.status is not None or self.stream.error is not None


_ENDED = ("completed", "incomplete")
