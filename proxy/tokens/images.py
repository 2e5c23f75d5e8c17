"""What an image costs in input tokens (OpenAI's tile rule; PROTOCOL.md §7.3).

`detail: low` is 85 tokens. `high` (and `auto`, counted as high to stay conservative) scales
the image to fit 2048x2048, then its shortest side to 768, and costs 170 per 512px tile plus 85.
The size is read from a data URL's header when it has one; an image we cannot measure (a remote
URL, an unknown format) is counted as the largest common case, a 2048x2048 square scaled down.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct

LOW_DETAIL_TOKENS = 85
TILE_TOKENS = 170
BASE_TOKENS = 85
# 1536x1536 after scaling: 3x3 tiles.
UNKNOWN_SIZE_TOKENS = BASE_TOKENS + TILE_TOKENS * 9


def image_tokens(url: str | None, detail: str | None) -> int:
    if detail == "low":
        return LOW_DETAIL_TOKENS
    size = image_size(url) if url else None
    if size is None:
        return UNKNOWN_SIZE_TOKENS
    return tile_tokens(*size)


def tile_tokens(width: int, height: int) -> int:
    if width <= 0 or height <= 0:
        return UNKNOWN_SIZE_TOKENS
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = 768 / min(w, h)
    if scale < 1:
        w, h = w * scale, h * scale
    return BASE_TOKENS + TILE_TOKENS * math.ceil(w / 512) * math.ceil(h / 512)


def image_size(url: str) -> tuple[int, int] | None:
    """Width and height from a base64 data URL's image header; None when unknown."""
    if not url.startswith("data:"):
        return None
    comma = url.find(",")
    if comma < 0 or ";base64" not in url[:comma]:
        return None
    # The header lives in the first few hundred bytes (JPEG can need more: take 64 KB).
    head = url[comma + 1:comma + 1 + 87384]
    head = head[: len(head) - len(head) % 4]
    try:
        data = base64.b64decode(head, validate=False)
    except (binascii.Error, ValueError):
        return None
    return _png(data) or _gif(data) or _webp(data) or _jpeg(data)


def _png(data: bytes) -> tuple[int, int] | None:
    if data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) >= 24:
        return struct.unpack(">II", data[16:24])
    return None


def _gif(data: bytes) -> tuple[int, int] | None:
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        return struct.unpack("<HH", data[6:10])
    return None


def _webp(data: bytes) -> tuple[int, int] | None:
    if data[:4] != b"RIFF" or data[8:12] != b"WEBP" or len(data) < 30:
        return None
    chunk = data[12:16]
    if chunk == b"VP8X":
        w = int.from_bytes(data[24:27], "little") + 1
        h = int.from_bytes(data[27:30], "little") + 1
        return w, h
    if chunk == b"VP8 ":
        w, h = struct.unpack("<HH", data[26:30])
        return w & 0x3FFF, h & 0x3FFF
    if chunk == b"VP8L" and len(data) >= 25:
        bits = int.from_bytes(data[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    return None


def _jpeg(data: bytes) -> tuple[int, int] | None:
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 9 < len(data):
        if data[i] != 0xFF:
            return None
        marker = data[i + 1]
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        length = struct.unpack(">H", data[i + 2:i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", data[i + 5:i + 9])
            return w, h
        i += 2 + length
    return None
