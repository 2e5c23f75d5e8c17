"""Audio and file sizes read from base64 data without decoding more than needed.

Pure readers: a wav's duration from its header, an mp3's from its first frame's bitrate and the
data's size (a PDF's pages are read by `pdf.py`, with `decoded_slice`). Each decodes a bounded
slice of the base64 and answers None on data it cannot read; garbage never raises.
"""

from __future__ import annotations

import base64
import binascii
import struct

_HEAD_CHARS = 8192  # base64 characters holding a wav or mp3 header (6 KB)


def data_of(url: str) -> str:
    """The base64 text of a data URL (`data:...;base64,XXX`), or the text itself when bare."""
    if url.startswith("data:"):
        comma = url.find(",")
        return url[comma + 1:] if comma >= 0 else ""
    return url


def decoded_size(data: str) -> int:
    """Bytes the base64 text decodes to, without decoding it."""
    size = len(data) * 3 // 4
    return size - min(2, len(data) - len(data.rstrip("=")))


def decoded_slice(data: str, start: int, chars: int) -> bytes:
    """Decoded bytes from byte offset `start` (rounded down to a base64 group), at most
    `chars` characters' worth."""
    first = start // 3 * 4
    piece = data[first:first + chars]
    piece = piece[: len(piece) - len(piece) % 4]
    try:
        return base64.b64decode(piece, validate=False)[start - first // 4 * 3:]
    except (binascii.Error, ValueError):
        return b""


def wav_seconds(data: str) -> float | None:
    head = decoded_slice(data, 0, _HEAD_CHARS)
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    i, byte_rate = 12, 0
    while i + 8 <= len(head):
        kind, size = head[i:i + 4], struct.unpack("<I", head[i + 4:i + 8])[0]
        if kind == b"fmt " and i + 20 <= len(head):
            byte_rate = struct.unpack("<I", head[i + 16:i + 20])[0]  # after format, channels, rate
        elif kind == b"data":
            if byte_rate <= 0:
                return None
            # A streamed wav writes 0 or 0xFFFFFFFF here: the data actually sent bounds it.
            available = decoded_size(data) - (i + 8)
            length = size if 0 < size <= available else available
            return max(0, length) / byte_rate
        i += 8 + size + (size & 1)
    return None


# MPEG audio bitrates in kbit/s by [version is MPEG-1][layer 1..3][index].
_BITRATES = {
    (True, 1): (0, 32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448),
    (True, 2): (0, 32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384),
    (True, 3): (0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320),
    (False, 1): (0, 32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256),
    (False, 2): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
    (False, 3): (0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160),
}


def mp3_seconds(data: str) -> float | None:
    """From the first frame's bitrate: exact for constant bitrate; for variable bitrate the first
    frame is usually its info frame at a low rate, so the duration comes out long (safe)."""
    start = 0
    head = decoded_slice(data, 0, _HEAD_CHARS)
    if head[:3] == b"ID3" and len(head) >= 10:
        # An ID3v2 tag (cover art can make it large) precedes the audio: skip it.
        size = 0
        for byte in head[6:10]:
            size = size << 7 | (byte & 0x7F)
        start = 10 + size
        head = decoded_slice(data, start, _HEAD_CHARS)
    for i in range(len(head) - 3):
        if head[i] == 0xFF and head[i + 1] & 0xE0 == 0xE0:
            bitrate = _frame_bitrate(head[i + 1], head[i + 2])
            if bitrate:
                return max(0, decoded_size(data) - start - i) * 8 / (bitrate * 1000)
    return None


def _frame_bitrate(b1: int, b2: int) -> int:
    version, layer, index = (b1 >> 3) & 3, (b1 >> 1) & 3, b2 >> 4
    if version == 1 or layer == 0 or index in (0, 15) or (b2 >> 2) & 3 == 3:
        return 0  # reserved values: not a frame header
    return _BITRATES[version == 3, 4 - layer][index]


def is_pdf(data: str) -> bool:
    return decoded_slice(data, 0, 8)[:5] == b"%PDF-"
