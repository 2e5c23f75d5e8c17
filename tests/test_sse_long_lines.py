"""A long line arriving in many reads is searched for its end once, not from its start again at
every read: in a stream with CR line ends (the general path) an 8 MB line in 16 KB reads took
half a minute of the event loop, every other client waiting."""

from __future__ import annotations

import re
from typing import Any

import pytest

from proxy import sse
from proxy.sse import SseDecoder


class _CountingEol:
    """`sse._EOL`, counting the bytes its searches cover."""

    def __init__(self) -> None:
        self.scanned = 0
        self._eol = re.compile(rb"\r\n|\r|\n")

    def search(self, buffer: Any, start: int = 0) -> re.Match[bytes] | None:
        match = self._eol.search(buffer, start)
        self.scanned += (match.end() if match else len(buffer)) - start
        return match


@pytest.mark.parametrize("eol", [b"\r\n", b"\r"])
@pytest.mark.parametrize("limit", [None, 64 * 1024])  # held whole, or passed on in pieces
def test_a_long_line_is_searched_once_whatever_the_reads(monkeypatch: pytest.MonkeyPatch,
                                                         eol: bytes, limit: int | None) -> None:
    counting = _CountingEol()
    monkeypatch.setattr(sse, "_EOL", counting)
    long_line = b"data: " + b"x" * (1 << 20) + eol + eol
    stream = b"data: 1" + eol + eol + long_line + b"data: 2" + eol + eol
    decoder = SseDecoder() if limit is None else SseDecoder(limit)
    events = [e for i in range(0, len(stream), 1024) for e in decoder.feed(stream[i:i + 1024])]
    events += decoder.flush()
    assert b"".join(e.raw for e in events) == stream
    assert [e.data for e in events if e.complete] == (
        ["1", "x" * (1 << 20), "2"] if limit is None else ["1", "2"])
    assert counting.scanned < 2 * len(stream)
