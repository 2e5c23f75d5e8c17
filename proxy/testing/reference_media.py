"""The fake upstream's "true" cost of images, audio, files and response schemas, per model.

Written from PROTOCOL.md §7.3 and the provider facts the estimator's modules cite, apart from
the estimator's arithmetic: it shares only the pure readers of an image's size and an audio
clip's duration, so a wrong constant or formula in the estimator shows as a difference against
these counts. A PDF's pages it reads its own way, as a reader does: the page tree's `/Count`, in
the plain bytes or in any Flate stream (object streams hold the tree since PDF 1.5), inflated
whole; it trusts its tests' PDFs and bounds only what one stream may inflate to.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
import struct
import zlib
from collections.abc import Mapping
from typing import Any

from proxy.tokens import media
from proxy.tokens.images import image_size

# family: ("tile", base, per tile) or ("patch", multiplier, patch cap). Longest prefix wins.
IMAGE_COSTS: dict[str, tuple[str, float, float]] = {
    "gpt-4o-mini": ("tile", 2833, 5667), "o1": ("tile", 75, 150), "o3": ("tile", 75, 150),
    "gpt-4.1-mini": ("patch", 1.62, 1536), "gpt-4.1-nano": ("patch", 2.46, 1536),
    "o4-mini": ("patch", 1.72, 1536), "codex-mini": ("patch", 1.72, 1536),
    "gpt-5-mini": ("patch", 1.62, 1536), "gpt-5-nano": ("patch", 2.46, 1536),
    "gpt-5": ("patch", 1.2, 2500),
}
DEFAULT_IMAGE_COST = ("tile", 85, 170)
AUDIO_TOKENS_PER_SECOND = 1000 / 60
PDF_PAGE_TEXT = 1000
PDF_PAGE_PX = (768, 994)
# A PNG header of a page's rendered size: the image rule reads sizes from headers.
_PAGE_IMAGE = "data:image/png;base64," + base64.b64encode(
    b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + struct.pack(">II", *PDF_PAGE_PX)
    + b"\0" * 8).decode()


def image_cost(model: str) -> tuple[str, float, float]:
    name = model.lower().split("/")[-1]
    name = name[3:] if name.startswith("ft:") else name
    matches = [family for family in IMAGE_COSTS if name.startswith(family)]
    return IMAGE_COSTS[max(matches, key=len)] if matches else DEFAULT_IMAGE_COST


def image_tokens(model: str, url: Any, detail: Any) -> int:
    kind, a, b = image_cost(model)
    size = image_size(url) if isinstance(url, str) else None
    if kind == "tile":
        if detail == "low":
            return int(a)
        if size is None:
            return int(a + 9 * b)
        return int(a + b * _tile_count(*size))
    if size is None:
        return math.ceil(a * b)
    return math.ceil(a * _patch_count(size[0], size[1], int(b)))


def _tile_count(width: int, height: int) -> int:
    if max(width, height) > 2048:
        ratio = 2048 / max(width, height)
        width, height = width * ratio, height * ratio
    if min(width, height) > 768:
        ratio = 768 / min(width, height)
        width, height = width * ratio, height * ratio
    return math.ceil(width / 512) * math.ceil(height / 512)


def _patch_count(width: int, height: int, cap: int) -> int:
    count = -(-width // 32) * -(-height // 32)
    if count <= cap:
        return count
    ratio = math.sqrt(1024 * cap / (width * height))
    ratio *= min(math.floor(width * ratio / 32) / (width * ratio / 32),
                 math.floor(height * ratio / 32) / (height * ratio / 32))
    return min(cap, math.ceil(width * ratio / 32) * math.ceil(height * ratio / 32))


def audio_tokens(audio: Any) -> int:
    if not isinstance(audio, Mapping) or not isinstance(audio.get("data"), str):
        return 0
    data = media.data_of(audio["data"])
    seconds = media.mp3_seconds(data) if audio.get("format") == "mp3" else media.wav_seconds(data)
    if seconds is None:
        seconds = media.mp3_seconds(data)
    if seconds is None:  # unreadable: as 32 kbit/s
        seconds = media.decoded_size(data) * 8 / 32_000
    return math.ceil(seconds * AUDIO_TOKENS_PER_SECOND)


def file_tokens(model: str, file: Any) -> int:
    if not isinstance(file, Mapping):
        return 0
    page = image_tokens(model, _PAGE_IMAGE, "high") + PDF_PAGE_TEXT
    data = file.get("file_data")
    if not isinstance(data, str) or not data:
        return page
    data = media.data_of(data)
    if not media.is_pdf(data):
        return math.ceil(media.decoded_size(data) / 4)
    pages = pdf_pages(data) or math.ceil(media.decoded_size(data) / 50_000)  # unreadable
    return pages * page


_STREAM_DATA = re.compile(rb"stream\r?\n")
_FLAT_DICT = re.compile(rb"<<([^<>]*)>>")  # a dictionary holding none: a page tree node
_STREAM_LIMIT = 64 * 1024 * 1024


def pdf_pages(data: str) -> int:
    """The largest `/Count` of a `/Type /Pages` node (the root's), else the page objects."""
    try:
        raw = base64.b64decode(data)
    except (binascii.Error, ValueError):
        return 0
    texts = [raw, *(_inflated(memoryview(raw)[at.end():]) for at in _STREAM_DATA.finditer(raw))]
    counts = [_node_count(node) for text in texts for node in _FLAT_DICT.findall(text)]
    if any(counts):
        return max(counts)
    return sum(len(re.findall(rb"/Type\s*/Page\b", text)) for text in texts)


def _inflated(stream: memoryview) -> bytes:
    try:
        return zlib.decompressobj().decompress(stream, _STREAM_LIMIT)
    except zlib.error:
        return b""


def _node_count(node: bytes) -> int:
    count = re.search(rb"/Count\s+(\d+)", node)
    return int(count.group(1)) if count and re.search(rb"/Type\s*/Pages\b", node) else 0


def part_tokens(model: str, part: Mapping[str, Any]) -> int | None:
    """A media part's cost; None for a part that is not media."""
    kind = part.get("type")
    if kind == "image_url":
        image = part.get("image_url")
        if isinstance(image, Mapping):
            return image_tokens(model, image.get("url"), image.get("detail"))
        return image_tokens(model, image, None)
    if kind in ("input_image", "computer_screenshot"):
        return image_tokens(model, part.get("image_url"), part.get("detail"))
    if kind == "input_audio":
        return audio_tokens(part.get("input_audio"))
    if kind == "file":
        return file_tokens(model, part.get("file"))
    if kind == "input_file":
        return file_tokens(model, part)
    return None
