"""Small real media built in the test: PNG headers, wav clips, mp3 frames, multi-page PDFs."""

from __future__ import annotations

import base64
import io
import os
import struct
import wave
import zlib


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
