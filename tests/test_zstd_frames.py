"""The zstd frame walk, against zstandard's own bytes: a stream inflates whole however it is cut
into reads, and only a stream that stops where a frame ends counts as ended; anything that
stops inside a frame (its header, a block, its checksum, a skippable frame's payload) is cut
short, at every byte."""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Callable

import aiohttp
import pytest
import zstandard
from hypothesis import given
from hypothesis import strategies as st

from proxy.server.inflate import inflater
from proxy.zstd_frames import FrameWalk, NotZstd

ZSTD_MAGIC = bytes.fromhex("28b52ffd")


def skippable(payload: bytes, nibble: int = 0) -> bytes:
    """A skippable frame (RFC 8878 §3.1.2): a magic number 0x184D2A5?, the payload's size, the
    payload; decoders pass over it."""
    return struct.pack("<II", 0x184D2A50 | nibble, len(payload)) + payload


def ends_at_every_byte(stream: bytes) -> list[bool]:
    """`ended` after each byte, fed a byte at a time (every header cut every way); with a
    step for each byte, so that it follows any stream to its end."""
    walk = FrameWalk(bytes_per_step=1)
    ended = []
    for i in range(len(stream)):
        walk.feed(stream[i:i + 1])
        ended.append(walk.ended)
    return ended


def test_a_frame_ends_only_after_its_last_byte() -> None:
    # By hand (RFC 8878 §3.1.1): a single-segment frame of 13 bytes' content, a raw block of
    # three, then the last block, RLE: one byte said ten times.
    stream = (ZSTD_MAGIC + bytes([0x20, 13]) + bytes([3 << 3, 0, 0]) + b"abc"
              + bytes([1 | 1 << 1 | 10 << 3, 0, 0]) + b"z")
    assert zstandard.ZstdDecompressor().decompress(stream) == b"abc" + b"z" * 10
    assert ends_at_every_byte(stream) == [False] * (len(stream) - 1) + [True]


def test_a_checksum_and_every_header_field_are_passed_over() -> None:
    # zstandard writes a content size of 1, 2 or 4 bytes by the size (a window descriptor too,
    # past a single segment), and the checksum's 4 bytes after the last block.
    for size in (0, 300, 70_000, 5_000_000):
        stream = zstandard.ZstdCompressor(write_checksum=True).compress(bytes(size))
        assert ends_at_every_byte(stream)[-5:] == [False] * 4 + [True]


@pytest.mark.parametrize("single_segment", [False, True])
@pytest.mark.parametrize("content_size_flag", [0, 1, 2, 3])
@pytest.mark.parametrize("dictionary_id_flag", [0, 1, 2, 3])
def test_every_frame_header_layout_is_passed_over(single_segment: bool, content_size_flag: int,
                                                  dictionary_id_flag: int) -> None:
    # By hand: the layouts zstandard writes only for dictionaries or contents over 4 GiB too.
    # Dictionary id 0 is no dictionary; a 2-byte content size is stored less 256 (RFC 8878
    # §3.1.1.1.4).
    size = 200 if content_size_flag == 0 else 300
    stored = size - 256 if content_size_flag == 1 else size
    width = (1 if single_segment else 0, 2, 4, 8)[content_size_flag]
    content_size = stored.to_bytes(width, "little") if width else b""
    header = (ZSTD_MAGIC + bytes([content_size_flag << 6 | single_segment << 5
                                  | dictionary_id_flag])
              + (b"" if single_segment else b"\x00")  # a window of 1 KiB
              + bytes((0, 1, 2, 4)[dictionary_id_flag]) + content_size)
    stream = header + bytes([1 | 1 << 1 | size << 3 & 0xFF, size >> 5, 0]) + b"q"
    assert zstandard.ZstdDecompressor().decompressobj().decompress(stream) == b"q" * size
    assert ends_at_every_byte(stream) == [False] * (len(stream) - 1) + [True]


def test_nothing_fed_is_no_stream() -> None:
    # A zstd stream is one or more frames: no bytes are none.
    walk = FrameWalk()
    walk.feed(b"")
    assert walk.ended is False


@pytest.mark.parametrize("stream", [
    b"\x1f\x8b\x08\x00 gzip",  # another coding's magic number
    ZSTD_MAGIC + bytes([0x20, 1]) + bytes([1 | 3 << 1, 0, 0]),  # a block of the reserved type
], ids=["no magic number", "reserved block type"])
def test_a_structure_no_decoder_reads_is_not_zstd(stream: bytes) -> None:
    with pytest.raises(NotZstd):
        FrameWalk().feed(stream)
    inflate = inflater("zstd")
    assert inflate is not None
    with pytest.raises(aiohttp.ClientPayloadError, match="zstd"):
        inflate(stream)


# One frame's content: short; long and compressible; long and incompressible (several blocks
# each, as a block holds at most 128 KiB).
CONTENTS = st.one_of(
    st.binary(max_size=2_000),
    st.builds(lambda part, times: part * times, st.binary(min_size=1, max_size=50),
              st.one_of(st.integers(1, 100), st.integers(3_000, 8_000))),
    st.builds(lambda seed, size: random.Random(seed).randbytes(size), st.integers(),
              st.one_of(st.integers(0, 1_000), st.integers(130_000, 400_000))),
)


@st.composite
def frames(draw: st.DrawFn, least_flushed: int = 1) -> tuple[bytes, bytes]:
    """The compressed bytes of a frame and its content: a skippable frame, or zstandard's at a
    random level, with or without checksum and content size, written whole or as a stream
    flushed block by block (every `least_flushed` bytes or more)."""
    if draw(st.integers(0, 5)) == 0:
        return skippable(draw(st.binary(max_size=300)), draw(st.integers(0, 15))), b""
    content = draw(CONTENTS)
    packer = zstandard.ZstdCompressor(level=draw(st.integers(-5, 9)),
                                      write_checksum=draw(st.booleans()),
                                      write_content_size=draw(st.booleans()))
    if draw(st.booleans()):
        return packer.compress(content), content
    stream = packer.compressobj()
    step = draw(st.integers(least_flushed, max(least_flushed, 200_000)))
    parts = []
    for i in range(0, len(content), step):
        parts.append(stream.compress(content[i:i + step]))
        if draw(st.booleans()):
            parts.append(stream.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK))
    return b"".join([*parts, stream.flush()]), content


def pieces(stream: bytes, splits: list[int]) -> list[bytes]:
    edges = [0, *sorted(cut for cut in splits if cut < len(stream)), len(stream)]
    return [stream[a:b] for a, b in zip(edges, edges[1:])]


def frame_ends(parts: list[tuple[bytes, bytes]]) -> list[int]:
    return [sum(len(coded) for coded, _ in parts[:i + 1]) for i in range(len(parts))]


def fed(stream: bytes, splits: list[int]) -> tuple[bytes, bool | None]:
    """`stream` inflated read by read, cut at `splits`; what came out and whether it ended."""
    inflate = inflater("zstd")
    assert inflate is not None
    out = b"".join(inflate(piece) for piece in pieces(stream, splits))
    return out, inflate.ended


# Flushed no more often than every 64 KiB: a few dozen blocks at most, which the walk always
# follows (its free steps); streams of smaller blocks are the walk's alone, below.
@given(st.lists(frames(least_flushed=65_536), min_size=1, max_size=3), st.data())
def test_a_stream_inflates_whole_and_ends_only_where_a_frame_does(parts, data) -> None:
    stream = b"".join(coded for coded, _ in parts)
    content = b"".join(content for _, content in parts)
    splits = st.lists(st.integers(0, len(stream)), max_size=6)
    ends = frame_ends(parts)
    assert fed(stream, data.draw(splits)) == (content, True)
    # Strict prefixes: a few anywhere, and each side of every frame's end.
    cuts = data.draw(st.lists(st.integers(0, len(stream) - 1), max_size=4))
    for cut in {*cuts, *(end + side for end in ends for side in (-1, 0, 1))}:
        if not 0 <= cut < len(stream):
            continue
        out, ended = fed(stream[:cut], data.draw(splits))
        whole = [content for (coded, content), end in zip(parts, ends) if end <= cut]
        # A prefix that stops where a frame ends is a whole stream of fewer frames, as a gzip
        # body of fewer members is: each frame stands alone, and nothing in the coding says
        # how many follow (only the HTTP framing could, and it is whole here).
        assert ended == (cut in ends)
        assert out.startswith(b"".join(whole))
        assert content.startswith(out)


@given(st.lists(frames(), min_size=1, max_size=3), st.data())
def test_the_walk_finds_every_frame_end_however_small_the_blocks(parts, data) -> None:
    stream = b"".join(coded for coded, _ in parts)
    ends = frame_ends(parts)
    walk = FrameWalk(bytes_per_step=1)
    seen = 0
    for piece in pieces(stream, data.draw(st.lists(st.integers(0, len(stream)), max_size=20))):
        walk.feed(piece)
        seen += len(piece)
        assert walk.ended == (seen in ends)
    if len(stream) <= 20_000:  # every prefix, a byte at a time
        assert [i + 1 for i, end in enumerate(ends_at_every_byte(stream)) if end] == ends


MIB = 1024 * 1024
EMPTY_FRAME = zstandard.ZstdCompressor().compress(b"")
# Bodies of the smallest units a stream can hold, a few mebibytes of them: millions of steps.
SWARMS = {
    "empty blocks": ZSTD_MAGIC + bytes([0, 0]) + bytes(3) * (MIB // 3) + bytes([1, 0, 0]),
    "empty frames": EMPTY_FRAME * (MIB // len(EMPTY_FRAME)),
    "empty skippable frames": skippable(b"") * (MIB // 8),
}


@pytest.mark.parametrize("swarm", list(SWARMS))
def test_the_walk_gives_up_on_a_swarm_of_tiny_units_at_a_bounded_cost(swarm: str) -> None:
    stream = SWARMS[swarm] * 4
    assert zstandard.ZstdDecompressor().decompressobj(read_across_frames=True).decompress(
        stream) == b""
    followed = FrameWalk(bytes_per_step=1)
    spent_following = _seconds(lambda: followed.feed(stream))
    assert followed.ended is True
    walk = FrameWalk()
    spent = _seconds(lambda: walk.feed(stream))
    assert walk.ended is None
    # It gives up after a step for every 256 bytes: some 16,000 steps, of 0.5 to 1.4 million.
    assert spent < spent_following / 8, (spent, spent_following)
    walk.feed(stream)  # and takes no more
    assert walk.ended is None


def _seconds(run: Callable[[], object]) -> float:
    began = time.perf_counter()
    run()
    return time.perf_counter() - began
