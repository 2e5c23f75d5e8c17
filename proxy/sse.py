"""An incremental server-sent-events decoder that keeps every event's exact bytes.

The relay forwards upstream bytes as they come and must be able to drop a whole event (the
usage chunk a client did not ask for), so each `SseEvent` carries its raw bytes, blank line
included, next to its parsed `event` name and joined `data`. Lines end in CRLF, LF or CR
(WHATWG); a CR at the end of a chunk waits for the next byte, which may be its LF. Comment-only
blocks (keep-alives) come out as events without data so their bytes are forwarded too. An
event larger than `max_event_bytes` is not held: its bytes come out in pieces marked
`complete=False`, data unread. Nothing here raises on any input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

_EOL = re.compile(rb"\r\n|\r|\n")
_BOM = b"\xef\xbb\xbf"
DEFAULT_MAX_EVENT_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class SseEvent:
    raw: bytes
    data: str | None = None  # data lines joined with "\n"; None when the block had none
    event: str | None = None
    id: str | None = None
    complete: bool = True  # False: a piece of an oversized event, forwarded unread

    @property
    def done(self) -> bool:
        return self.data is not None and self.data.strip() == "[DONE]"

    def json(self) -> Any:
        """The data parsed as JSON; None when absent or not JSON."""
        if not self.data:
            return None
        try:
            return orjson.loads(self.data)
        except orjson.JSONDecodeError:
            return None


class SseDecoder:
    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._max = max(max_event_bytes, 16)
        self._buf = bytearray()
        self._scan = 0  # bytes of `_buf` before this are lines of the current event, parsed
        self._in_line = False  # the current line's start was already passed on (oversize)
        self._oversize = False
        self._first_line = True
        self._reset()

    def _reset(self) -> None:
        self._data: list[bytes] = []
        self._has_data = False
        self._event: str | None = None
        self._id: str | None = None

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buf += chunk
        events = self._drain(final=False)
        if len(self._buf) > self._max:
            events.append(self._spill())
        return events

    @property
    def inside_line(self) -> bool:
        """The bytes so far end in the middle of a line: a stream that ends here was cut."""
        return self._in_line or (bool(self._buf) and self._buf[-1] not in b"\r\n")

    def flush(self) -> list[SseEvent]:
        """At the end of the stream: the last event even without its blank line."""
        events = self._drain(final=True)
        if self._buf:
            if self._scan < len(self._buf) and not self._oversize:
                self._line(bytes(self._buf[self._scan:]))
            events.append(self._dispatch(len(self._buf)))
        return events

    def _drain(self, final: bool) -> list[SseEvent]:
        events = []
        while (match := _EOL.search(self._buf, self._scan)) is not None:
            if match.group() == b"\r" and match.end() == len(self._buf) and not final:
                break  # a CR at the very end may be the first half of a CRLF
            line = bytes(self._buf[self._scan:match.start()])
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

    def _dispatch(self, end: int) -> SseEvent:
        raw = bytes(self._buf[:end])
        del self._buf[:end]
        self._scan = 0
        if self._oversize:
            event = SseEvent(raw, complete=False)
        else:
            data = b"\n".join(self._data).decode("utf-8", "replace") if self._has_data else None
            event = SseEvent(raw, data, self._event, self._id)
        self._oversize = self._in_line = False
        self._reset()
        return event

    def _spill(self) -> SseEvent:
        """Pass on what is held of an oversized event, keeping a trailing CR undecided."""
        cut = len(self._buf) - (1 if self._buf.endswith(b"\r") else 0)
        self._in_line = self._in_line or cut > self._scan
        raw = bytes(self._buf[:cut])
        del self._buf[:cut]
        self._scan = max(0, self._scan - cut)
        self._oversize = True
        self._reset()
        return SseEvent(raw, complete=False)
