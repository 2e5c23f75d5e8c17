"""Answers that come compressed although the proxy asked for `Accept-Encoding: identity`.

The proxy reads the answers of the routes it compacts (usage, rejections it can retry, the usage
chunk it hides), and asks for them uncompressed; a server that compresses them all the same
(`Accept-Encoding` is a preference) is read inflated here. A body goes to the client as it came
when the client accepts its encoding, else plain; a stream, which the proxy edits, goes plain,
without its `Content-Encoding`. gzip and deflate are inflated with the standard library's zlib,
br with Brotli and zstd with zstandard (aiohttp reads zstd with another package, and not at all
on this Python without it); another encoding, or several stacked, is relayed unread. The
client's compressed request bodies are inflated by the same code (`client_body.py`), bounded by
`server.max_body_mb`: there `AnswerTooLarge` is the client's 413.

An answer inflates to at most `INFLATED_LIMIT` bytes (a body whole, a stream in all): a few
kilobytes of gzip can say gigabytes of zeros, and the proxy would hold them for every tenant's
loss. Each library is asked for its output a piece (1 MiB) at a time, never past the bound, so
memory stays bounded however the bytes are cut and whatever one read says; past it, the answer is one the proxy cannot read
(`AnswerTooLarge`): a body becomes a 502, a stream ends with its error frame.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from typing import Protocol

import aiohttp
import brotli
import zstandard

from proxy.zstd_frames import FrameWalk, NotZstd


class Inflate(Protocol):
    """Inflates a body read by read; `ended`: whether what it was fed ended where the coding
    says its data ends (None: not known)."""

    def __call__(self, chunk: bytes) -> bytes: ...

    @property
    def ended(self) -> bool | None: ...


# No model answer comes near it (the largest are megabytes of text). Fixed, not a multiple of
# `server.max_body_mb`: what clients may send says nothing of what an answer holds.
INFLATED_LIMIT = 256 * 1024 * 1024


class AnswerTooLarge(aiohttp.ClientPayloadError):
    """An answer that inflates past its bound: a ClientPayloadError, so that a stream's relay
    ends it as it ends any answer that breaks off."""

    error_code = "upstream_answer_too_large"  # the 502's code, when it is read before relaying

    def __init__(self, encoding: str, limit: int) -> None:
        super().__init__(f"the {encoding} answer inflates past {limit:,} bytes, more than any "
                         f"real answer: not read")


_ZLIB = frozenset({"gzip", "x-gzip", "deflate"})


def answer_encoding(headers: Mapping[str, str]) -> str | None:
    """The answer's content coding, lower case; None for a plain answer."""
    value = headers.get("Content-Encoding")
    if value is None:
        return None
    value = value.strip().lower()
    return None if value in ("", "identity") else value


def accepts(accept_encoding: str | None, encoding: str) -> bool:
    """Whether a client's `Accept-Encoding` names `encoding` (or `*`) with a weight above 0
    (RFC 9110 §12.5.3). False for a client that sent none: the RFC lets a server pick any
    coding then, but plain is what every client reads, and what the proxy asked for on its
    behalf."""
    if not accept_encoding:
        return False
    names = {encoding, *_ALIASES.get(encoding, ())}
    anything = False
    for item in accept_encoding.split(","):
        name, _, parameters = item.partition(";")
        name = name.strip().lower()
        if name in names:
            return _weight(parameters) > 0
        if name == "*":
            anything = _weight(parameters) > 0
    return anything


_ALIASES = {"gzip": ("x-gzip",), "x-gzip": ("gzip",)}


def _weight(parameters: str) -> float:
    for parameter in parameters.split(";"):
        name, _, value = parameter.partition("=")
        if name.strip().lower() == "q":
            try:
                return float(value.strip())
            except ValueError:
                return 0.0  # a weight that is no number: not accepted, as with none to read
    return 1.0


def inflater(encoding: str, limit: int = INFLATED_LIMIT) -> Inflate | None:
    """A function that inflates an answer of `encoding` read by read, raising `AnswerTooLarge`
    once all it gave would pass `limit` bytes; None when the proxy cannot inflate that
    encoding."""
    if encoding in _ZLIB:
        return _Inflater(encoding, limit)
    if encoding == "br":
        return _Unbrotli(limit)
    return _Unzstd(limit) if encoding == "zstd" else None


class _Bound:
    """What is left of an answer's bound."""

    def __init__(self, encoding: str, limit: int) -> None:
        self.encoding = encoding
        self.limit = limit
        self.left = limit

    def piece(self) -> int:
        """How much output to ask a library for at once: a byte past what is left tells an
        answer over the bound."""
        return min(self.left + 1, _PIECE)

    def take(self, data: bytes) -> bytes:
        if len(data) > self.left:
            raise AnswerTooLarge(self.encoding, self.limit)
        self.left -= len(data)
        return data


def _not_as_said(encoding: str) -> aiohttp.ClientPayloadError:
    # Raised as the upstream's failure: the relay ends the stream with its error frame.
    return aiohttp.ClientPayloadError(f"the answer does not inflate as its Content-Encoding "
                                      f"({encoding}) says")


# Output is asked for a piece at a time (and never more than a byte past what is left): a bomb
# is refused holding the bound's worth of pieces, not twice that in a buffer grown whole.
_PIECE = 1024 * 1024


class _Unbrotli:
    def __init__(self, limit: int) -> None:
        self._brotli = brotli.Decompressor()
        self._bound = _Bound("br", limit)

    def __call__(self, chunk: bytes) -> bytes:
        pieces = []
        try:
            while True:
                asked = self._bound.piece()
                piece = self._bound.take(self._brotli.process(chunk, output_buffer_limit=asked))
                pieces.append(piece)
                # A full piece may leave output in the decoder although it read all its input.
                if len(piece) < asked and self._brotli.can_accept_more_data():
                    return b"".join(pieces)
                chunk = b""  # the rest of what it holds, before any more input
        except brotli.error:
            raise _not_as_said("br") from None

    @property
    def ended(self) -> bool:
        """Whether what it was fed ended where the coding says its data ends."""
        return self._brotli.is_finished()


class _Unzstd:
    """zstd's decompressobj takes no output bound: its stream writer hands the output over in
    pieces of `_PIECE`, and the bound stops it at the first piece too many. The writer does not
    say where the input stopped: a walk over the frames does."""

    def __init__(self, limit: int) -> None:
        self._bound = _Bound("zstd", limit)
        self._pieces: list[bytes] = []
        # It reads frame after frame: a server may compress each flush as a frame of its own
        # (RFC 8878 §3.1).
        self._zstd = zstandard.ZstdDecompressor().stream_writer(
            self, write_size=_PIECE, write_return_read=True, closefd=False)
        self._frames = FrameWalk()

    def write(self, piece: bytes) -> int:
        self._pieces.append(self._bound.take(bytes(piece)))
        return len(piece)

    def __call__(self, chunk: bytes) -> bytes:
        try:
            self._frames.feed(chunk)
            self._zstd.write(chunk)
        except (zstandard.ZstdError, NotZstd):
            raise _not_as_said("zstd") from None
        data, self._pieces = b"".join(self._pieces), []
        return data

    @property
    def ended(self) -> bool | None:
        """Whether what it was fed ended where a frame ends (None: a stream of blocks or frames
        too small to follow, see `FrameWalk`)."""
        return self._frames.ended


class _Inflater:
    def __init__(self, encoding: str, limit: int) -> None:
        self._encoding = encoding
        self._bound = _Bound(encoding, limit)
        self._zlib: zlib._Decompress | None = None  # made once the first byte tells the format
        self._gzip = False
        self._between = False  # a gzip member ended and the next was given nothing yet

    def __call__(self, chunk: bytes) -> bytes:
        if self._zlib is None:
            if not chunk:
                return b""
            self._zlib = zlib.decompressobj(_window_bits(chunk))
            self._gzip = chunk[0] == 0x1F
        try:
            data = self._inflate(chunk)
            # A gzip answer may be several members in a row (RFC 1952 §2.2; a server that
            # compresses each flush on its own): zlib stops at the end of each one.
            while self._gzip and self._zlib.eof:
                rest = self._zlib.unused_data
                self._zlib = zlib.decompressobj(_GZIP_BITS)
                self._between = not rest
                if not rest:
                    break
                data += self._inflate(rest)
            return data
        except zlib.error:
            raise _not_as_said(self._encoding) from None

    @property
    def ended(self) -> bool:
        """Whether what it was fed ended where the coding says its data ends (for gzip, at the
        end of a member)."""
        return self._zlib is not None and (self._zlib.eof or self._between)

    def _inflate(self, chunk: bytes) -> bytes:
        assert self._zlib is not None
        if chunk:
            self._between = False
        pieces = []
        while True:
            asked = self._bound.piece()
            piece = self._bound.take(self._zlib.decompress(chunk, asked))
            pieces.append(piece)
            if len(piece) < asked:  # all its input read, all its output given
                return b"".join(pieces)
            chunk = self._zlib.unconsumed_tail


_GZIP_BITS = 47  # zlib detects a gzip or zlib header


def _window_bits(head: bytes) -> int:
    # Servers that say `deflate` often send raw deflate, without the zlib header (as aiohttp,
    # recognised by its first byte).
    return _GZIP_BITS if head[0] == 0x1F or head[0] & 0x0F == 8 else -15


def inflated(data: bytes, encoding: str | None, limit: int = INFLATED_LIMIT) -> bytes | None:
    """A whole body, inflated; None when it cannot be (an encoding the proxy cannot inflate, or
    bytes that are not what it says). Raises `AnswerTooLarge` past `limit` bytes."""
    if encoding is None:
        return data
    inflate = inflater(encoding, limit)
    if inflate is None:
        return None
    try:
        return inflate(data)
    except AnswerTooLarge:
        raise
    except aiohttp.ClientPayloadError:
        return None
