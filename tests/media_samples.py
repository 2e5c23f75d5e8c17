"""Small real media built in the test: PNG headers, wav clips, mp3 frames, multi-page PDFs
(classic, and PDF 1.5 with object streams)."""

from __future__ import annotations

import base64
import functools
import io
import os
import struct
import wave
import zlib
from collections.abc import Iterable

MIB = 1024 * 1024


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def png(width: int, height: int, payload: int = 64) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", os.urandom(payload))
            + chunk(b"IEND", b""))


def png_url(width: int, height: int, payload: int = 64) -> str:
    return "data:image/png;base64," + b64(png(width, height, payload))


def wav(seconds: float, rate: int = 16_000, channels: int = 1, width: int = 2) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as clip:
        clip.setnchannels(channels)
        clip.setsampwidth(width)
        clip.setframerate(rate)
        clip.writeframes(os.urandom(int(seconds * rate) * channels * width))
    return out.getvalue()


def mp3(seconds: float, kbps: int = 128, id3: int = 0) -> bytes:
    """Constant-bitrate MPEG-1 Layer III frames at 44.1 kHz (silent payload), after an ID3v2 tag
    of `id3` bytes when asked."""
    index = (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320).index(kbps)
    frame = bytes((0xFF, 0xFB, index << 4, 0x64))
    frame += bytes(144 * kbps * 1000 // 44_100 - 4)
    frames = frame * round(seconds * kbps * 1000 / 8 / len(frame))
    tag = b""
    if id3:
        size = bytes(((id3 >> 21) & 0x7F, (id3 >> 14) & 0x7F, (id3 >> 7) & 0x7F, id3 & 0x7F))
        tag = b"ID3\x04\x00\x00" + size + os.urandom(id3)
    return tag + frames


def pdf(pages: int, padding: int = 0) -> bytes:
    """A PDF of `pages` text pages, with `padding` bytes of an embedded binary stream (a scan)."""
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>",
               b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (3 + i) for i in range(pages))
               + b"] /Count %d >>" % pages]
    objects += [b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] >>"] * pages
    objects.append(b"<< /Length %d >>\nstream\n" % padding + os.urandom(padding) + b"\nendstream")
    body = b"%PDF-1.4\n"
    for number, text in enumerate(objects, 1):
        body += b"%d 0 obj\n" % number + text + b"\nendobj\n"
    return body + b"trailer\n<< /Root 1 0 R >>\n%%EOF\n"


def _refs(numbers: Iterable[int]) -> bytes:
    return b" ".join(b"%d 0 R" % n for n in numbers)


def packed_pdf(pages: int, per_stream: int = 100, padding: int = 0) -> bytes:
    """A PDF 1.5 as pdfTeX writes one: the catalog, the page tree (nodes of 6 pages under a
    root) and every page object in zlib-compressed object streams of `per_stream` objects, where
    a byte scan sees no page; each page's content stream, a `padding`-byte image and the
    cross-reference stream as plain objects."""
    groups = [range(start, min(start + 6, pages)) for start in range(0, pages, 6)]
    first_page = 3 + len(groups)
    packed = {1: b"<< /Type /Catalog /Pages 2 0 R >>",
              2: b"<< /Type /Pages /Count %d /Kids [%s] >>" % (pages, _refs(range(3, first_page)))}
    for node, group in enumerate(groups, 3):
        packed[node] = b"<< /Type /Pages /Count %d /Parent 2 0 R /Kids [%s] >>" % (
            len(group), _refs(first_page + p for p in group))
        for p in group:
            packed[first_page + p] = (b"<< /Type /Page /Parent %d 0 R /Contents %d 0 R "
                                      b"/MediaBox [0 0 612 792] >>" % (node, first_page + pages + p))
    plain = {first_page + pages + p: _stream(zlib.compress(b"BT /F1 12 Tf (Page %d) Tj ET" % p))
             for p in range(pages)}
    plain[first_page + 2 * pages] = _stream(os.urandom(padding), b"/Filter /DCTDecode ")
    numbers, where = sorted(packed), {}
    for index in range(0, len(numbers), per_stream):
        stream_number = first_page + 2 * pages + 1 + index // per_stream
        chosen = numbers[index:index + per_stream]
        plain[stream_number] = _object_stream([packed[n] for n in chosen], chosen)
        where.update({n: (stream_number, i) for i, n in enumerate(chosen)})
    return _with_xref(plain, where)


def _stream(data: bytes, keys: bytes = b"/Filter /FlateDecode ") -> bytes:
    return b"<< %s/Length %d >>\nstream\n" % (keys, len(data)) + data + b"\nendstream"


def _object_stream(objects: list[bytes], numbers: list[int]) -> bytes:
    offsets, at = [], 0
    for text in objects:
        offsets.append(at)
        at += len(text) + 1
    head = b" ".join(b"%d %d" % pair for pair in zip(numbers, offsets)) + b"\n"
    body = zlib.compress(head + b"\n".join(objects) + b"\n")
    return _stream(body, b"/Type /ObjStm /N %d /First %d /Filter /FlateDecode " % (
        len(objects), len(head)))


def _with_xref(plain: dict[int, bytes], packed: dict[int, tuple[int, int]]) -> bytes:
    """The file: plain objects at their offsets, then a cross-reference stream (PDF 1.5) that
    finds each packed object by its object stream and index."""
    out, offsets = bytearray(b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n"), {}
    for number in sorted(plain):
        offsets[number] = len(out)
        out += b"%d 0 obj\n" % number + plain[number] + b"\nendobj\n"
    xref = max(plain) + 1
    offsets[xref] = len(out)
    rows = [struct.pack(">BIH", 0, 0, 65535)]
    for number in range(1, xref + 1):
        if number in offsets:
            rows.append(struct.pack(">BIH", 1, offsets[number], 0))
        else:
            rows.append(struct.pack(">BIH", 2, *packed[number]))
    keys = b"/Type /XRef /Size %d /W [1 4 2] /Root 1 0 R /Filter /FlateDecode " % (xref + 1)
    out += b"%d 0 obj\n" % xref + _stream(zlib.compress(b"".join(rows)), keys) + b"\nendobj\n"
    return bytes(out + b"startxref\n%d\n%%%%EOF\n" % offsets[xref])


def object_stream(content: bytes, compressed: bytes | None = None) -> bytes:
    """An object stream holding `content` (or the given stream data as it is)."""
    data = zlib.compress(content) if compressed is None else compressed
    return (b"7 0 obj\n<< /Type /ObjStm /N 1 /First 4 /Filter /FlateDecode /Length %d >>\n"
            b"stream\n" % len(data) + data + b"\nendstream\nendobj\n")


@functools.cache
def zip_bomb(pages: int) -> bytes:
    """An object stream that inflates to 64 MiB: `pages` page objects, then zeros."""
    packer = zlib.compressobj(9)
    parts = [packer.compress(b"<< /Type /Page >>\n" * pages)]
    parts += [packer.compress(bytes(MIB)) for _ in range(64)]
    return b"%PDF-1.5\n" + object_stream(b"", b"".join([*parts, packer.flush()]))
