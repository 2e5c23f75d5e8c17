"""A PDF's page count, read from its base64 on the request path: bounded for hostile input.

Since PDF 1.5 most writers (pdfTeX, Word, browsers' print to PDF) put the page objects and the
page tree in compressed object streams (`/Type /ObjStm`), where a byte scan sees no page: such
a PDF was counted by its size and came out several times short. The count is the larger of the
`/Type /Page` objects seen and the page tree's `/Count` (the root's is the largest), each read in
the plain bytes and in the object streams, inflated.

Bounds, as the bytes are the client's: the base64 is decoded 3 MB at a time, never whole; only
object streams are inflated, at most MAX_STREAMS of them, and the bytes they take and give stay
within a budget of INFLATE_RATIO times the PDF's size plus INFLATE_BASE, at most INFLATE_LIMIT
(a zip bomb stops there); at most MAX_NODES page tree nodes are read, each within WINDOW bytes
of its `/Type`. Every search is a regular expression or a find over bytes, with Python work only
per object stream and tree node, so a PDF of nothing but markers costs what the old scan did.
A count that met a bound, or missed an object stream it could not read, is returned as not
`complete`, for the caller to weigh against the PDF's size.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

from proxy.tokens import media

MAX_STREAMS = 1024  # pdfTeX packs 100 objects a stream: some 200 streams for a 1,000-page book
MAX_NODES = 2048  # pdfTeX makes a tree node per 6 pages: some 12,000 pages
INFLATE_RATIO = 16  # object streams inflate some 5 to 7 times
INFLATE_BASE = 64 * 1024
INFLATE_LIMIT = 16 * 1024 * 1024
WINDOW = 8192  # a node's `/Count` sits within its dictionary: a flat tree of ~800 kids

_CHUNK_CHARS = 4 * 1024 * 1024  # the plain bytes, 3 MB at a time
_PIECE_CHARS = 8 * 1024  # an object stream is read 6 KB at a time
_OVERLAP = 64  # bytes a chunk hands to the next, longer than any marker
_DICT_CHARS = 4096  # base64 holding an object stream's dictionary, up to `stream`
# A page object: `/Type /Page` not followed by `s` (that is a tree node, `/Pages`).
_PAGE = re.compile(rb"/Type\s{0,8}/Page(?![a-zA-Z])")
_NODE = re.compile(rb"/Type\s{0,8}/(Pages|ObjStm)(?![a-zA-Z])")
_COUNT = re.compile(rb"/Count\s{1,8}(\d{1,9})(?![\d.])")
_STREAM = re.compile(rb"[^<>]{0,2048}>>\s{0,8}stream\r?\n")


@dataclass(frozen=True)
class Pages:
    found: int  # page objects seen, or the page tree's count when larger; 0 when neither
    complete: bool  # False when a bound stopped the reading or an object stream was unreadable


@dataclass
class _Reading:
    budget: int  # bytes the object streams may still take and give
    pages: int = 0  # page objects seen
    count: int = 0  # the largest tree node's `/Count`
    streams: int = 0
    nodes: int = 0
    bounded: bool = False  # a bound stopped the reading
    unread: bool = False  # an object stream was not Flate data (encrypted, say) or cut short

    def plain(self, data: str, chunk: bytes, at: int, cut: int) -> None:
        """A chunk of the PDF's bytes at offset `at`; what starts past `cut` is the next's."""
        self.pages += len(_PAGE.findall(chunk)) - len(_PAGE.findall(chunk, cut))
        for match in _NODE.finditer(chunk):
            if match.start() >= cut or self.bounded:
                return
            start = at + match.start()
            if match.group(1) == b"Pages":
                window = media.decoded_slice(data, max(0, start - WINDOW), 4 * WINDOW // 3 * 2)
                self._node(window, min(start, WINDOW))
            else:
                self._object_stream(data, start)

    def _node(self, buffer: bytes, at: int) -> None:
        """The tree node whose `/Type` is at `at`: its `/Count`, read between the brackets
        nearest it (a node seldom nests a dictionary: a `/Count` past one is missed, and the
        page objects still count)."""
        self.nodes += 1
        self.bounded = self.nodes > MAX_NODES
        if self.bounded:
            return
        low = max(buffer.rfind(b"<", 0, at), buffer.rfind(b">", 0, at)) + 1
        high = min((i for i in (buffer.find(b"<", at), buffer.find(b">", at)) if i >= 0),
                   default=len(buffer))
        for found in _COUNT.findall(buffer, low, high):
            self.count = max(self.count, int(found))

    def _object_stream(self, data: str, start: int) -> None:
        self.streams += 1
        self.bounded = self.streams > MAX_STREAMS
        head = media.decoded_slice(data, start, _DICT_CHARS)
        keyword = _STREAM.match(head)
        if self.bounded or keyword is None:
            self.unread = self.unread or keyword is None
            return
        content = b"".join(_inflated(data, start + keyword.end(), self))
        self.bounded = self.budget <= 0
        self.pages += len(_PAGE.findall(content))
        for match in _NODE.finditer(content):
            if self.bounded:
                return
            if match.group(1) == b"Pages":
                self._node(content, match.start())


def pdf_pages(data: str) -> Pages:
    """The pages of the PDF in `data` (base64), read within the bounds above."""
    size = media.decoded_size(data)
    reading = _Reading(budget=min(INFLATE_LIMIT, INFLATE_BASE + INFLATE_RATIO * size))
    for chunk, at, cut in _chunks(data):
        reading.plain(data, chunk, at, cut)
    complete = not reading.bounded and not reading.unread
    return Pages(max(reading.pages, reading.count), complete)


def _chunks(data: str) -> Iterator[tuple[bytes, int, int]]:
    """The PDF's bytes 3 MB at a time, each with its offset and a cut near its end: a marker
    that starts past the cut is read with the next chunk, which begins there."""
    carry, at = b"", 0
    for first in range(0, len(data), _CHUNK_CHARS):
        chunk = carry + media.decoded_slice(data, first // 4 * 3, _CHUNK_CHARS)
        cut = len(chunk) if first + _CHUNK_CHARS >= len(data) else len(chunk) - _OVERLAP
        yield chunk, at, max(0, cut)
        carry, at = chunk[max(0, cut):], at + max(0, cut)


def _inflated(data: str, start: int, reading: _Reading) -> Iterator[bytes]:
    """The Flate stream whose data begins at byte `start`, inflated a piece at a time until it
    ends, proves not to be Flate data, or the budget is spent (by bytes read and given)."""
    inflater = zlib.decompressobj()
    while not inflater.eof and reading.budget > 0:
        piece = media.decoded_slice(data, start, _PIECE_CHARS)
        if not piece:
            break
        start += len(piece)
        try:
            # Output past the budget stays unread in the inflater: memory holds the bound.
            out = inflater.decompress(piece, max(1, reading.budget))
        except zlib.error:
            break
        reading.budget -= len(piece) - len(inflater.unused_data) + len(out)
        yield out
    reading.unread = reading.unread or not inflater.eof and reading.budget > 0
