"""An incremental server-sent-events decoder that keeps every event's exact bytes.

The relay forwards upstream bytes as they come and must be able to drop a whole event (the
usage chunk a client did not ask for), so each `SseEvent` carries its raw bytes, blank line
included, next to its parsed `event` name and joined `data`. Lines end in CRLF, LF or CR
(WHATWG); a CR at the end of a chunk waits for the next byte, which may be its LF, unless it
ends a blank line: that ends the event whatever follows, so the event comes out at once, and an
LF that then starts the next chunk (the CR's own, of a CRLF) comes out alone as an event without
data, its bytes relayed as they came (`_BLANK`; an SSE reader dispatches nothing for it).
Comment-only blocks (keep-alives) come out as events without data so their bytes are forwarded too. An
event larger than `max_event_bytes` is given up on: what is held of it comes out as a piece
marked `complete=False`, data unread, and so does each later read of it as it comes, nothing of
it held again (but a trailing CR), until its blank line. Nothing here raises on any input.

The decoder runs once per streamed token, so it has two paths: while the stream holds no CR
(the usual case) each chunk is split at its blank lines in C, the usual events (a lone `data:`
line; an `event:` line and a `data:` line) taking the shortest way; anything else (CR line
ends, an oversized event, the end of the stream) goes the general line-by-line way. Both give
the same events. Data stays bytes until asked for as text: orjson parses bytes. A large event
that came in many reads is copied once when it ends, its data a view of those bytes: held at
most about twice its size, not four times (`_held_then_rest`; the general way notes where the
data lines are and takes them from the event's bytes at its end). The per-event byte searches
use `find`, not `in`: `sub in data` first tries `sub` as an integer, formatting and clearing a
TypeError, which costs about as much again as the search itself.
"""

from __future__ import annotations

import re
from functools import partial
from typing import Any, NamedTuple

import orjson

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
# No real event comes near it. The largest is a Responses `response.completed`, which repeats
# the whole output beside the request's instructions and tools: about 1 MB for a 128,000-token
# answer (the largest output limit) with 190 KB of instructions and 100 tools, measured through
# the fake upstream; a generated image adds a few MB. Past it an event is passed on unread.
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024
# A held event at least this large has its data as a view of its raw bytes, not a copy.
_VIEW_FROM = 64 * 1024


def _text(value: bytes | memoryview) -> str:
    return str(value, "utf-8", "replace")


# A tuple rather than a frozen dataclass: one is made per streamed token, and a tuple is built
# without a Python-level `__init__` storing each field through `object.__setattr__`.
class SseEvent(NamedTuple):
    raw: bytes
    # The data lines joined with b"\n"; None when the block had none. A view of `raw` for a
    # large event that came in many reads (`_VIEW_FROM`): the event's size is not held twice.
    data_bytes: bytes | memoryview | None = None
    event: str | None = None
    id: str | None = None
    complete: bool = True  # False: a piece of an oversized event, forwarded unread

    @property
    def data(self) -> str | None:
        """The data lines joined with "\\n", as text; None when the block had none."""
        return None if self.data_bytes is None else _text(self.data_bytes)

    @property
    def done(self) -> bool:
        # The byte search settles nearly every event; the text's strip() decides the rest as
        # before, since it also strips the non-ASCII whitespace that bytes.strip() keeps.
        body = self.data_bytes
        if body.__class__ is memoryview:
            return _text(body).strip() == "[DONE]"
        return body is not None and b"[DONE]" in body and _text(body).strip() == "[DONE]"

    def json(self) -> Any:
        """The data parsed as JSON; None when absent or not JSON."""
        if not self.data_bytes:
            return None
        try:
            return orjson.loads(self.data_bytes)
        except orjson.JSONDecodeError:
            if self.data_bytes.__class__ is bytes and self.data_bytes.isascii():
                return None
        # orjson refuses invalid UTF-8, which the text form has replaced: that may still parse.
        try:
            return orjson.loads(_text(self.data_bytes))
        except orjson.JSONDecodeError:
            return None


_BLANK = SseEvent(b"\n")  # a blank line with no field before it: an event of its own
# The tuple's own constructor, skipping the generated Python-level `__new__`: for the one-line
# `data:` event the fast path makes per token.
_data_event = partial(tuple.__new__, SseEvent)


def _event_pair(raw: bytes, end: int) -> SseEvent | None:
    """The event of `raw` (its lines end at `end`, the blank line follows) when it is
    `event: ` + a name, then one `data: ` line, as Responses streams send every event; None
    for any other block. A whole read is the usual `raw`: it is kept, not copied."""
    eol = raw.find(b"\n")  # found: `raw` ends in its blank line
    if not raw.startswith(b"data: ", eol + 1) or raw.find(b"\n", eol + 1) != end:
        return None
    return _data_event((raw, raw[eol + 7:end], raw[7:eol].decode("utf-8", "replace"), None,
                        True))


def _field(line: bytes) -> tuple[bytes, bytes]:
    """A line's field name and value (a comment line has the name b"")."""
    name, colon, value = line.partition(b":")
    if colon and value.startswith(b" "):
        value = value[1:]
    return name, value


def _field_at(buf: bytes | bytearray, start: int, end: int) -> tuple[bytes | bytearray, int]:
    """`_field` of the line `buf[start:end]`, read in place: its name, and where its value
    starts. A name longer than any field read is b"", not copied: the line may be a large one."""
    colon = buf.find(b":", start, end)
    name_end = end if colon < 0 else colon
    name = buf[start:name_end] if name_end - start <= 5 else b""
    return name, end if colon < 0 else colon + 1 + buf.startswith(b" ", colon + 1, end)


def _head(buf: bytearray, end: int) -> bytes:
    """`bytes(buf[:end])`, for a large event in one copy, not two (the slice, then the bytes)."""
    if end < _VIEW_FROM:
        return bytes(buf[:end])
    with memoryview(buf) as view:
        return bytes(view[:end])


def _data_of(raw: bytes, spans: list[tuple[int, int]]) -> bytes | memoryview:
    """The data lines at `spans` of `raw` joined; a large single line is a view, not a copy."""
    if len(spans) == 1:
        start, end = spans[0]
        return memoryview(raw)[start:end] if end - start >= _VIEW_FROM else raw[start:end]
    view = memoryview(raw)
    return b"\n".join([view[start:end] for start, end in spans])


class SseDecoder:
    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max(max_event_bytes, 16)
        self._buf = bytearray()
        self._scan = 0  # bytes of `_buf` before this are lines of the current event, parsed
        # Bytes of `_buf` before this hold no line end past `_scan`: a long line that comes in
        # many reads is searched once, not from its start at every read.
        self._searched = 0
        self._in_line = False  # the current line's start was already passed on (oversize)
        self._oversize = False
        self._first_line = True
        # The fast path may run: `_buf` holds no CR and none of its lines is parsed yet.
        self._plain = True
        # The last event ended in a CR that was a read's last byte: an LF first in the next
        # read is that CR's second half, not a blank line (`_feed_general` reads it).
        self._cr_ended = False
        self._reset()

    def _reset(self) -> None:
        self._data: list[tuple[int, int]] = []  # where in `_buf` the data lines are
        self._has_data = False
        self._event: str | None = None
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        """The events `chunk` completes.

        What the fast path holds never contains a blank line nor starts with one, so a new
        event ends only inside `chunk` or where a held LF meets a leading one.
        """
        if not self._plain or chunk.find(b"\r") >= 0:
            return self._feed_general(chunk)
        buf = self._buf
        # The usual read: one whole event, of one `data:` line (chat) or of an `event:` line
        # and a `data:` line (Responses).
        if not buf and chunk.endswith(b"\n\n") and not self._first_line:
            if chunk.startswith(b"data: ") and chunk.find(b"\n") == len(chunk) - 2:
                return [_data_event((chunk, chunk[6:-2], None, None, True))]
            if (chunk.startswith(b"event: ")
                    and (pair := _event_pair(chunk, len(chunk) - 2)) is not None):
                return [pair]
        if buf:
            if chunk.find(b"\n\n") < 0 and (buf[-1] != 10 or not chunk.startswith(b"\n")):
                buf += chunk  # no copy of what is held: a big event may come in many reads
                return self._feed_general(b"") if len(buf) > self._max else []
            buf += chunk
            chunk = bytes(buf)  # one copy of the held event (`bytes(buf) + chunk` made two)
            buf.clear()
            if chunk.find(b"\n\n") >= _VIEW_FROM:
                return self._held_then_rest(chunk)
        # Split at the blank lines: what comes before each is a block of lines (or nothing,
        # for a second blank line), at most one LF to its head being a blank line of its own.
        *blocks, tail = chunk.split(b"\n\n")
        events: list[SseEvent] = []
        append = events.append
        for block in blocks:
            if block.startswith(b"data: ") and block.find(b"\n") < 0 and not self._first_line:
                append(_data_event((block + b"\n\n", block[6:], None, None, True)))
            elif (block.startswith(b"event: ") and not self._first_line
                  and (pair := _event_pair(block + b"\n\n", len(block))) is not None):
                append(pair)
            elif not block:
                events += (_BLANK, _BLANK)
            elif block.startswith(b"\n"):
                events += (_BLANK, self._block(block[1:]))
            else:
                append(self._block(block))
        if tail.startswith(b"\n"):
            append(_BLANK)
            tail = tail[1:]
        if tail:
            buf += tail
            if len(buf) > self._max:
                events += self._feed_general(b"")  # parses the held lines, then spills
        return events

    @property
    def held(self) -> int:
        """How many bytes the decoder holds: of the event under way, which it has not passed on."""
        return len(self._buf)

    @property
    def skipping(self) -> bool:
        """The event under way grew past the bound: its bytes pass on unread until it ends."""
        return self._oversize

    @property
    def inside_line(self) -> bool:
        """The bytes so far end in the middle of a line: a stream that ends here was cut."""
        return self._in_line or (bool(self._buf) and self._buf[-1] not in b"\r\n")

    def flush(self) -> list[SseEvent]:
        """At the end of the stream: the last event even without its blank line."""
        events = self._drain(final=True)
        if self._buf:
            if self._scan < len(self._buf) and not self._oversize:
                self._line(self._scan, len(self._buf))
            events.append(self._dispatch(len(self._buf)))
        self._cr_ended = False
        self._plain = not self._buf and not self._oversize
        return events

    def _held_then_rest(self, chunk: bytes) -> list[SseEvent]:
        """The events of `chunk`, whose first is a large event that was held: not copied into a
        block, then into its raw bytes and its data, each as large (four times its size held in
        all), but read in place, its data a view of its bytes; what follows goes the usual way."""
        end = chunk.find(b"\n\n")
        # `raw` is `chunk` itself when the event ends the read, as a large one mostly does.
        raw, rest = chunk[:end + 2], chunk[end + 2:]
        events = [self._viewed_block(raw, end)]
        return events + self.feed(rest) if rest else events

    def _viewed_block(self, raw: bytes, end: int) -> SseEvent:
        """`_block` of `raw[:end]`, its data lines read as views of `raw` (one line: no copy)."""
        view = memoryview(raw)
        data: list[memoryview] = []
        event = id_ = None
        start = 0
        if self._first_line:
            self._first_line = False
            start = 3 if raw.startswith(_BOM) else 0
        while start <= end:
            stop = raw.find(b"\n", start, end)
            stop = end if stop < 0 else stop
            name, value = _field_at(raw, start, stop)
            if name == b"data":
                data.append(view[value:stop])
            elif name == b"event":
                event = _text(raw[value:stop])
            elif name == b"id" and raw.find(b"\0", value, stop) < 0:
                id_ = _text(raw[value:stop])
            start = stop + 1
        joined = None if not data else data[0] if len(data) == 1 else b"\n".join(data)
        return SseEvent(raw, joined, event, id_)

    def _block(self, block: bytes) -> SseEvent:
        """The event of a block of lines, each ended by LF, followed by a blank line."""
        lines = block.split(b"\n")
        if self._first_line:
            self._first_line = False
            lines[0] = lines[0].removeprefix(_BOM)
        data: list[bytes] = []
        has_data = False
        event = id_ = None
        for line in lines:
            name, value = _field(line)
            if name == b"data":
                data.append(value)
                has_data = True
            elif name == b"event":
                event = _text(value)
            elif name == b"id" and b"\0" not in value:
                id_ = _text(value)
        return SseEvent(block + b"\n\n", b"\n".join(data) if has_data else None, event, id_)

    # ------------------------------------------------------------ the general path

    def _feed_general(self, chunk: bytes) -> list[SseEvent]:
        self._plain = False
        events = []
        if self._cr_ended:
            self._cr_ended = False
            if chunk.startswith(b"\n"):  # the CRLF's second half: a line with no field
                events.append(_BLANK)
                chunk = chunk[1:]
        self._buf += chunk
        events += self._drain(final=False)
        # Once an event is given up on, what comes of it is passed on at once, never held again.
        if self._oversize or len(self._buf) > self._max:
            events += self._spill()
        self._plain = not self._buf and not self._oversize and not self._cr_ended
        return events

    def _drain(self, final: bool) -> list[SseEvent]:
        events = []
        while (match := _EOL.search(self._buf, max(self._scan, self._searched))) is not None:
            blank = match.start() == self._scan and not self._in_line
            if match.group() == b"\r" and match.end() == len(self._buf) and not final:
                if blank:  # it ends the event whatever comes next: not held for a next read
                    events.append(self._dispatch(match.end()))
                    self._cr_ended = True
                    return events
                self._searched = match.start()
                return events  # a CR at the very end may be the first half of a CRLF
            if blank:
                events.append(self._dispatch(match.end()))
                continue
            if not self._oversize:
                self._line(self._scan, match.start())
            self._in_line = False
            self._scan = match.end()
        self._searched = len(self._buf)
        return events

    def _line(self, start: int, end: int) -> None:
        """Read the line `_buf[start:end]` in place: a data line is only noted, its bytes are
        taken once the event ends, from the event's own (no copy of a large line held twice)."""
        buf = self._buf
        if self._first_line:
            self._first_line = False
            start += 3 if buf.startswith(_BOM, start, end) else 0
        name, value = _field_at(buf, start, end)
        if name == b"data":
            self._data.append((value, end))
            self._has_data = True
        elif name == b"event":
            self._event = _text(buf[value:end])
        elif name == b"id" and buf.find(b"\0", value, end) < 0:
            self._id = _text(buf[value:end])

    def _dispatch(self, end: int) -> SseEvent:
        raw = _head(self._buf, end)
        del self._buf[:end]
        self._scan = self._searched = 0
        if self._oversize:
            event = SseEvent(raw, complete=False)
        else:
            data = _data_of(raw, self._data) if self._has_data else None
            event = SseEvent(raw, data, self._event, self._id)
        self._oversize = self._in_line = False
        self._reset()
        return event

    def _spill(self) -> list[SseEvent]:
        """Pass on what is held of an oversized event, keeping a trailing CR undecided."""
        cut = len(self._buf) - (1 if self._buf.endswith(b"\r") else 0)
        self._oversize = True
        self._reset()
        if not cut:
            return []
        self._in_line = self._in_line or cut > self._scan
        if cut == len(self._buf):  # one copy, not a slice copied again: the bound's bytes twice
            raw = bytes(self._buf)
            self._buf.clear()
        else:
            raw = bytes(self._buf[:cut])
            del self._buf[:cut]
        self._scan = max(0, self._scan - cut)
        self._searched = max(0, self._searched - cut)
        return [SseEvent(raw, complete=False)]
