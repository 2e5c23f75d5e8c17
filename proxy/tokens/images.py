"""What an image costs in input tokens, by the model's rule (PROTOCOL.md §7.3).

Two rules exist. Tile models scale a `high` image (and `auto`, counted as high to stay
conservative) to fit 2048x2048, then its shortest side to 768, and cost `tile` per 512px tile
plus `base`; `detail: low` costs `base`. Patch models cover the image with 32px patches, scaled
down to fit a cap, each costing `multiplier` tokens; they ignore `detail` (measured: PROTOCOL
§7.3), so a low image is counted as high. The rule is chosen from the model's name like its
encoding (`image_rule`); a name we do not know keeps the gpt-4o tile rule, the one most
OpenAI-compatible servers copy and the rule of the original vision models.

The size is read from a data URL's header when it has one; an image we cannot measure (a remote
URL, an unknown format) is counted as the largest case the rule allows.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass

TILE_PX, PATCH_PX = 512, 32


@dataclass(frozen=True)
class ImageRule:
    """A model family's image cost: tiles (`base` + `tile` each) or patches (`multiplier`)."""

    name: str
    base: int = 0
    tile: int = 0
    multiplier: float = 0.0
    max_patches: int = 1536

    def tokens(self, url: str | None, detail: str | None) -> int:
        if detail == "low" and not self.multiplier:
            return self.base
        size = image_size(url) if url else None
        if size is None:
            return self.unknown_size_tokens()
        return self.size_tokens(*size)

    def size_tokens(self, width: int, height: int) -> int:
        if width <= 0 or height <= 0:
            return self.unknown_size_tokens()
        if self.multiplier:
            return math.ceil(patches(width, height, self.max_patches) * self.multiplier)
        return self.base + self.tile * tiles(width, height)

    def unknown_size_tokens(self) -> int:
        if self.multiplier:
            return math.ceil(self.max_patches * self.multiplier)
        # 3x3 tiles: above the 4x2 a 2048x768 image scales to, the most a tile image can cost.
        return self.base + self.tile * 9


def tiles(width: int, height: int) -> int:
    scale = min(1.0, 2048 / max(width, height))
    w, h = width * scale, height * scale
    scale = 768 / min(w, h)
    if scale < 1:
        w, h = w * scale, h * scale
    return math.ceil(w / TILE_PX) * math.ceil(h / TILE_PX)


def patches(width: int, height: int, cap: int) -> int:
    """32px patches covering the image, after scaling it down (whole patches per side) to
    fit `cap` when it needs more."""
    found = math.ceil(width / PATCH_PX) * math.ceil(height / PATCH_PX)
    if found <= cap:
        return found
    shrink = math.sqrt(PATCH_PX * PATCH_PX * cap / (width * height))
    w, h = width * shrink / PATCH_PX, height * shrink / PATCH_PX
    shrink *= min(math.floor(w) / w, math.floor(h) / h)
    found = math.ceil(width * shrink / PATCH_PX) * math.ceil(height * shrink / PATCH_PX)
    return min(found, cap)


# OpenAI's published constants (PROTOCOL.md §7.3) and, for the gpt-5 family, its vision guide.
# The gpt-5 mini/nano multipliers are the documented ones; usage measured by users is lower
# (1.2 and 1.5), so the documented figures are the conservative ones. Later gpt-5.x models
# bill 1.2 per patch up to 2500 patches (measured, undocumented): the plain gpt-5 family uses
# that, at or above its documented 70 + 140/tile for all but tiny images.
RULES = {rule.name: rule for rule in (
    ImageRule("gpt-4o", base=85, tile=170),
    ImageRule("gpt-4o-mini", base=2833, tile=5667),
    ImageRule("o1", base=75, tile=150),
    ImageRule("gpt-4.1-mini", multiplier=1.62),
    ImageRule("gpt-4.1-nano", multiplier=2.46),
    ImageRule("o4-mini", multiplier=1.72),
    ImageRule("gpt-5-mini", multiplier=1.62),
    ImageRule("gpt-5-nano", multiplier=2.46),
    ImageRule("gpt-5", multiplier=1.2, max_patches=2500),
)}
DEFAULT_RULE = RULES["gpt-4o"]
# Most specific first: the first prefix the model's name starts with picks its rule.
_PREFIXES = (("gpt-4o-mini", "gpt-4o-mini"), ("gpt-4.1-mini", "gpt-4.1-mini"),
             ("gpt-4.1-nano", "gpt-4.1-nano"), ("o4-mini", "o4-mini"),
             ("codex-mini", "o4-mini"), ("gpt-5-mini", "gpt-5-mini"),
             ("gpt-5-nano", "gpt-5-nano"), ("gpt-5", "gpt-5"), ("o1", "o1"), ("o3", "o1"))


def image_rule(model: str, override: str | None = None) -> ImageRule:
    """The rule for `model`: the profile's `image_rule` if given (the CLI refuses an unknown
    one), else by family."""
    if override in RULES:
        return RULES[override]
    # `provider/model` names (gateways) and fine-tunes (`ft:gpt-4o-mini:...`) keep the family.
    name = model.strip().lower().rsplit("/", 1)[-1].removeprefix("ft:")
    for prefix, rule in _PREFIXES:
        if name.startswith(prefix):
            return RULES[rule]
    return DEFAULT_RULE


def tile_tokens(width: int, height: int) -> int:
    """The gpt-4o tile rule's cost of a `high` image."""
    return DEFAULT_RULE.size_tokens(width, height)


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
