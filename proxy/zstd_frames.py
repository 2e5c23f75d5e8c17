"""Where a zstd stream's frames end, followed over the compressed bytes as they are fed.

zstandard's stream writer (the one zstd reader that takes an output bound) says nothing of
where the input stopped: a body cut inside a frame inflates as far as it goes, without an
error. This walk reads only the frame structure of RFC 8878 §3.1 (magic numbers, frame header
sizes, the 3-byte block headers, the optional checksum, skippable frames) and jumps over the
block contents, so its cost is a few steps a block (a block holds up to 128 KiB), not a byte.
It checks only what it needs to find its way (a magic number, a block type), the rest is the
decoder's; it is fed the same bytes and tells whether they stopped at a frame's end.

A step costs far more here than in the decoder, and a stream may be nothing but empty blocks
or frames (3 to 9 bytes each: millions in a body). The walk takes at most one step for each
`_BYTES_PER_STEP` bytes it was fed (and a few to begin with), then gives up and says nothing
(None), as the stream writer alone did. No encoder writes blocks that small but for a flush
every few bytes, and the check is for a body cut short on its way, not a guard against its
sender (who can always send a shorter body whole).
"""

from __future__ import annotations

_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE_MAGIC = 0x184D2A50  # the low four bits are free (RFC 8878 §3.1.2)
# By the frame header descriptor's flags (RFC 8878 §3.1.1.1.1).
_DICTIONARY_ID_SIZE = (0, 1, 2, 4)
_CONTENT_SIZE_SIZE = (0, 2, 4, 8)  # flag 0 of a single-segment frame: 1 byte
_RLE = 1
_RESERVED = 3
# Real streams take a step for every few kilobytes (a body compressed whole: a block for up to
# 128 KiB of it); a small body takes two or three.
_BYTES_PER_STEP = 256
_FIRST_STEPS = 64
_GAVE_UP = -1


class NotZstd(ValueError):
    """Bytes whose structure no zstd decoder reads."""


class FrameWalk:
    """Fed a zstd stream piece by piece; `ended`: whether what it was fed so far stops exactly
    where a frame ends (a stream is one or more frames, RFC 8878 §3.1), None once it gave up."""

    def __init__(self, bytes_per_step: int = _BYTES_PER_STEP) -> None:
        self._bytes_per_step = bytes_per_step
        self._skip = 0  # bytes of the current part (block, header field, payload) still to come
        self._held = b""  # the start of a header that the end of a piece cut
        self._in_frame = False  # what comes next: a block header, else a frame's magic number
        self._checksum = 0  # the size of the current frame's checksum, after its last block
        self._begun = False
        self._steps_left = _FIRST_STEPS
        self._fed_over = 0  # bytes fed since the last step granted

    @property
    def ended(self) -> bool | None:
        if self._steps_left == _GAVE_UP:
            return None
        return self._begun and not (self._in_frame or self._skip or self._held)

    def feed(self, data: bytes) -> None:
        """Follows `data`, the bytes after all fed before; raises `NotZstd` for a frame or
        block type that no decoder reads (so its size is unknown)."""
        if self._steps_left == _GAVE_UP:
            return
        granted, self._fed_over = divmod(self._fed_over + len(data),
                                          self._bytes_per_step)
        steps_left = self._steps_left + granted
        if self._held:
            data, self._held = self._held + data, b""
        end = len(data)
        at = self._skip
        while at < end:
            if not steps_left:
                self._steps_left = _GAVE_UP
                return
            steps_left -= 1
            if not self._in_frame:
                at = self._frame_header(data, at)
                continue
            if end - at < 3:
                at = self._hold(data, at)
                continue
            header = data[at] | data[at + 1] << 8 | data[at + 2] << 16
            kind = header >> 1 & 3
            if kind == _RESERVED:
                raise NotZstd("a block of the reserved type")
            # An RLE block carries its byte once; the size is how often it repeats.
            at += 4 if kind == _RLE else 3 + (header >> 3)
            if header & 1:  # the frame's last block
                at += self._checksum
                self._in_frame = False
        self._skip = at - end
        self._steps_left = steps_left

    def _frame_header(self, data: bytes, at: int) -> int:
        """Where the frame that begins at `at` has its first block (a skippable frame: where
        the next frame begins); `len(data)` with the header held when it is not all there."""
        left = len(data) - at
        magic = int.from_bytes(data[at:at + 4], "little") if left >= 4 else None
        if magic == _ZSTD_MAGIC and left >= 5:
            self._begun = self._in_frame = True
            self._checksum = 4 if data[at + 4] & 0x04 else 0
            return at + _frame_header_size(data[at + 4])
        if magic is not None and magic & ~0xF == _SKIPPABLE_MAGIC and left >= 8:
            self._begun = True
            return at + 8 + int.from_bytes(data[at + 4:at + 8], "little")
        if magic is None or magic == _ZSTD_MAGIC or magic & ~0xF == _SKIPPABLE_MAGIC:
            return self._hold(data, at)
        raise NotZstd("no frame's magic number")

    def _hold(self, data: bytes, at: int) -> int:
        self._held = bytes(data[at:])
        return len(data)


def _frame_header_size(descriptor: int) -> int:
    """The frame header's size from its descriptor byte (RFC 8878 §3.1.1.1): magic number and
    descriptor, then the window descriptor, dictionary id and content size, when present."""
    single_segment = descriptor & 0x20
    content_size_flag = descriptor >> 6
    content_size = _CONTENT_SIZE_SIZE[content_size_flag] or (1 if single_segment else 0)
    return 5 + (0 if single_segment else 1) + _DICTIONARY_ID_SIZE[descriptor & 3] + content_size
