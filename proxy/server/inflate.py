"""Answers that come compressed although the proxy asked for `Accept-Encoding: identity`.

The proxy reads the answers of the routes it compacts (usage, rejections it can retry, the usage
chunk it hides), and asks for them uncompressed; a server that compresses them all the same
(`Accept-Encoding` is a preference) is read inflated here. A body still goes to the client as it
came; a stream, which the proxy edits, goes plain, without its `Content-Encoding`. gzip and
deflate are inflated (the standard library's zlib); another encoding is relayed unread.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Mapping

import aiohttp

from proxy.server.relay import StreamTap

Inflate = Callable[[bytes], bytes]

_INFLATABLE = frozenset({"gzip", "x-gzip", "deflate"})


def answer_encoding(headers: Mapping[str, str]) -> str | None:
    """The answer's content coding, lower case; None for a plain answer."""
    value = headers.get("Content-Encoding")
    if value is None:
        return None
    value = value.strip().lower()
    return None if value in ("", "identity") else value


def inflater(encoding: str) -> Inflate | None:
    """A function that inflates an answer of `encoding` read by read; None when the proxy
    cannot inflate that encoding."""
    return _Inflater(encoding) if encoding in _INFLATABLE else None


class _Inflater:
    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._zlib: zlib._Decompress | None = None  # made once the first byte tells the format
        self._gzip = False

    def __call__(self, chunk: bytes) -> bytes:
        if self._zlib is None:
            if not chunk:
                return b""
            self._zlib = zlib.decompressobj(_window_bits(chunk))
            self._gzip = chunk[0] == 0x1F
        try:
            data = self._zlib.decompress(chunk)
            # A gzip answer may be several members in a row (RFC 1952 §2.2; a server that
            # compresses each flush on its own): zlib stops at the end of each one.
            while self._gzip and self._zlib.eof:
                rest = self._zlib.unused_data
                self._zlib = zlib.decompressobj(_GZIP_BITS)
                if not rest:
                    break
                data += self._zlib.decompress(rest)
            return data
        except zlib.error:
            # Raised as the upstream's failure: the relay ends the stream with its error frame.
            raise aiohttp.ClientPayloadError(f"the answer does not inflate as its "
                                             f"Content-Encoding ({self._encoding}) says") from None


_GZIP_BITS = 47  # zlib detects a gzip or zlib header


def _window_bits(head: bytes) -> int:
    # Servers that say `deflate` often send raw deflate, without the zlib header (as aiohttp,
    # recognised by its first byte).
    return _GZIP_BITS if head[0] == 0x1F or head[0] & 0x0F == 8 else -15


def inflated(data: bytes, encoding: str | None) -> bytes | None:
    """A whole body, inflated; None when it cannot be (an encoding the proxy cannot inflate, or
    bytes that are not what it says)."""
    if encoding is None:
        return data
    inflate = inflater(encoding)
    if inflate is None:
        return None
    try:
        return inflate(data)
    except aiohttp.ClientPayloadError:
        return None


class InflatingTap:
    """A tap fed the inflated stream."""

    def __init__(self, tap: StreamTap, inflate: Inflate) -> None:
        self.tap = tap
        self._inflate = inflate

    def feed(self, chunk: bytes) -> bytes:
        return self.tap.feed(self._inflate(chunk))

    def flush(self) -> bytes:
        return self.tap.flush()

    def failure_frame(self, message: str, code: str = "upstream_disconnected") -> bytes:
        return self.tap.failure_frame(message, code)

    def cut_inside_line(self) -> bool:
        return self.tap.cut_inside_line()

    def ended_early(self) -> bool:
        return self.tap.ended_early()

    @property
    def complete(self) -> bool:
        return self.tap.complete
