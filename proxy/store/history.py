"""History files (SPEC §5 offload): one JSON Lines file per thread, append-only.

A file's name is a digest of (tenant, normalized thread id), never the id itself. Each line is
`{"seq": n, "at": unix_time, "record": {...}}` with `seq` the line number. Appends are
fsynced (and a new file's directory entry too); a crash can leave at most a torn last line,
which `read` skips and reports. A write that fails half-way (a full disk) is cut back off, and
`retract` takes back a whole append whose checkpoint could not be written, so a retried
compaction does not offload the same messages twice. A kill between an append and its
checkpoint leaves lines no checkpoint accounts for: each checkpoint records the file's size
with its lines in (`history_end`), and `discard_tail` cuts the file back to that before the
next append. The methods block: from the event loop use the `*_async` wrappers, which run them
on a worker thread. `History` is what the compactor and the CLI use of them, which the Redis
history (`proxy/store/redis_history.py`) gives too.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from proxy.lru import LRU
from proxy.records import ThreadKey
from proxy.store import jsoncodec
from proxy.store.base import StoreError
from proxy.store.keys import storable_key

HISTORY_DIR = "history"
_CHUNK = 1 << 20


def thread_digest(key: ThreadKey) -> str:
    """The hex sha256 naming a thread's history (its file, or its Redis list) and its Redis
    keys: of the JSON array of its storable tenant and thread id."""
    stored = storable_key(key)
    return hashlib.sha256(jsoncodec.dumps([stored.tenant, stored.thread])).hexdigest()


def history_path(root: Path, key: ThreadKey) -> Path:
    """The thread's history file under `root` (`<state.path>/history`)."""
    return root / f"{thread_digest(key)}.jsonl"


def remove_history(root: Path, key: ThreadKey) -> int | None:
    """Delete the thread's history file; its size, or None when there was none. Called only
    once the thread's rows are gone (retention): a `HistoryFiles` keeps, per file, the size
    and line count it left, and a new file of the same name starts at size 0, which no size
    it kept for a file with lines matches."""
    path = history_path(root, key)
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return None
    return size


@dataclass(frozen=True)
class HistoryContents:
    records: list[dict[str, Any]] = field(default_factory=list)
    damaged_lines: tuple[int, ...] = ()  # 1-based lines that are not whole JSON: torn writes

    @property
    def torn(self) -> bool:
        return bool(self.damaged_lines)


@dataclass(frozen=True)
class Appended:
    """Where one append's lines sit in their file: enough to take them back."""

    path: str
    start: int  # the file's size before the append
    end: int  # and after it
    lines_before: int | None  # the line count before, when the file then ended whole


@dataclass(frozen=True)
class Discarded:
    """What `discard_tail` found: the file's size after it, and what it cut."""

    size: int  # 0 for a missing file
    bytes: int = 0
    lines: int = 0  # a torn last line counts as one


class History(Protocol):
    """What the compactor and the CLI use of a thread's history, on files or on Redis.

    `Appended.start/end`, `Discarded.size` and a checkpoint's `history_end` are positions in
    the implementation's unit: bytes for `HistoryFiles`, lines for `RedisHistory`. Failures
    are `OSError`s; `read_async` refuses (ValueError) a path that is not one of its own."""

    unit: str  # what a position counts: "bytes" or "lines"

    async def open(self) -> None:
        """Connect, when there is anything to connect to; before any other call."""

    async def close(self) -> None:
        """Release what `open` took. Idempotent."""

    async def offload_async(self, key: ThreadKey, records: Iterable[dict[str, Any]],
                            at: float | None = None) -> Appended:
        """Append all the records as lines, or none of them; returns where they went."""

    async def retract_async(self, appended: Appended) -> bool:
        """Take `appended` back if nothing came after it; returns whether it did."""

    async def discard_tail_async(self, key: ThreadKey, end: int) -> Discarded:
        """Cut the thread's history back to `end` when it is longer."""

    async def read_async(self, path: str) -> HistoryContents:
        """Every line at `path` (a `history_file`); damaged lines reported, not raised."""


# A tail entry no file size matches: the next append scans the file again.
_UNKNOWN_TAIL = (-1, 0)


class HistoryFiles:
    unit = "bytes"

    def __init__(self, root: str | Path) -> None:
        """`root` is the directory the files go in (`<state.path>/history`)."""
        self.root = Path(root).resolve()
        self._lock = threading.Lock()  # appends from several threads stay whole lines
        self._tails: LRU[Path, tuple[int, int]] = LRU(4096)  # path -> (size, lines) we left

    @classmethod
    def under(cls, state_path: str | Path) -> HistoryFiles:
        return cls(Path(state_path) / HISTORY_DIR)

    def path_for(self, key: ThreadKey) -> Path:
        return history_path(self.root, key)

    def append(self, key: ThreadKey, records: Iterable[dict[str, Any]],
               at: float | None = None) -> str:
        """Append records as lines, fsynced; returns the file's path."""
        return self.offload(key, records, at).path

    def offload(self, key: ThreadKey, records: Iterable[dict[str, Any]],
                at: float | None = None) -> Appended:
        """Append records as lines, fsynced; returns where they went, for `retract`."""
        path = self.path_for(key)
        stamp = time.time() if at is None else at
        with self._lock:
            self._ensure_root()
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                known = self._tails.get(path)
                appended, lines = _append_lines(fd, records, stamp, known, str(path))
                self._tails.put(path, (appended.end, lines))
            finally:
                os.close(fd)
            if known is None:
                fsync_dir(self.root)  # a new file's name must survive a crash too
        return appended

    def retract(self, appended: Appended) -> bool:
        """Cut `appended`'s lines off again, if nothing was appended after them; returns
        whether it did. Only the thread's compaction appends, one at a time, so nothing is."""
        path = self._inside(Path(appended.path))
        with self._lock:
            fd = os.open(path, os.O_RDWR)
            try:
                if os.fstat(fd).st_size != appended.end:
                    return False
                os.ftruncate(fd, appended.start)
                os.fsync(fd)
            finally:
                os.close(fd)
            before = appended.lines_before
            self._tails.put(path, _UNKNOWN_TAIL if before is None else (appended.start, before))
        return True

    def discard_tail(self, key: ThreadKey, end: int) -> Discarded:
        """Cut the thread's file back to `end` bytes when it is longer, fsynced: what lies past
        the size the last committed checkpoint recorded came from an attempt whose checkpoint
        never committed (a kill in between). A shorter or missing file is left as it is."""
        path = self.path_for(key)
        with self._lock:
            try:
                fd = os.open(path, os.O_RDWR)
            except FileNotFoundError:
                return Discarded(0)
            try:
                size = os.fstat(fd).st_size
                if size <= end:
                    return Discarded(size)
                count, whole = _scan(fd, size, end)
                os.ftruncate(fd, end)
                os.fsync(fd)  # the cut is on disk before anything is appended after it
            finally:
                os.close(fd)
            self._tails.put(path, _UNKNOWN_TAIL)  # the next append counts the lines again
        return Discarded(end, size - end, count + (0 if whole else 1))

    def read(self, path: str | Path) -> HistoryContents:
        """Read a history file; a torn line (a crash mid-append) is skipped and reported."""
        return parse_lines(self._inside(Path(path)).read_bytes())

    async def open(self) -> None:
        """Nothing to connect; the directory, made now if it is not there, must take files.
        Found unwritable only by a compaction, each one would keep its summary and lose the
        messages it summarized from the history, with a warning line each time."""
        await asyncio.to_thread(self._probe)

    def _probe(self) -> None:
        try:
            self._ensure_root()
            probe = self.root / f".probe-{os.getpid()}"
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            os.unlink(probe)
        except OSError as exc:
            raise StoreError(f"the history directory {self.root} cannot take files: "
                             f"{exc.strerror or exc}") from None

    async def close(self) -> None:
        """Nothing to release: every call opens and closes its file."""

    async def offload_async(self, key: ThreadKey, records: Iterable[dict[str, Any]],
                            at: float | None = None) -> Appended:
        return await asyncio.to_thread(self.offload, key, list(records), at)

    async def retract_async(self, appended: Appended) -> bool:
        return await asyncio.to_thread(self.retract, appended)

    async def discard_tail_async(self, key: ThreadKey, end: int) -> Discarded:
        return await asyncio.to_thread(self.discard_tail, key, end)

    async def read_async(self, path: str | Path) -> HistoryContents:
        return await asyncio.to_thread(self.read, path)

    def _ensure_root(self) -> None:
        try:
            self.root.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            return
        os.chmod(self.root, 0o700)  # mkdir's mode is filtered by the umask

    def _inside(self, path: Path) -> Path:
        resolved = path.resolve()
        if resolved.parent != self.root or resolved.suffix != ".jsonl":
            raise ValueError(f"not a history file under {self.root}: {path}")
        return resolved


def parse_lines(data: bytes) -> HistoryContents:
    # Empty lines are the split's, around a torn line's own line end: not lines of ours.
    return _parsed((n, line) for n, line in enumerate(data.split(b"\n"), start=1) if line)


def parse_values(values: Iterable[bytes]) -> HistoryContents:
    """The lines of a store that keeps each line whole (a Redis list): every value counts."""
    return _parsed(enumerate(values, start=1))


def _parsed(lines: Iterable[tuple[int, bytes]]) -> HistoryContents:
    records: list[dict[str, Any]] = []
    damaged: list[int] = []
    for number, line in lines:
        try:
            record = jsoncodec.loads(line)
        except ValueError:
            damaged.append(number)
            continue
        if isinstance(record, dict):
            records.append(record)
        else:
            damaged.append(number)
    return HistoryContents(records, tuple(damaged))


def _append_lines(fd: int, records: Iterable[dict[str, Any]], at: float,
                  known: tuple[int, int] | None, path: str) -> tuple[Appended, int]:
    """Write the lines and fsync; returns where they went and the file's line count after.
    A failed write is cut back off before its error goes on."""
    size = os.fstat(fd).st_size
    before, whole = (known[1], True) if known and known[0] == size else _scan(fd, size)
    # A torn last line from a crash gets its own line end, so it cannot swallow ours.
    chunks = [] if whole else [b"\n"]
    lines = before + len(chunks)
    for record in records:
        lines += 1
        chunks.append(jsoncodec.dumps({"seq": lines, "at": at, "record": record}) + b"\n")
    data = b"".join(chunks)
    try:
        _write_all(fd, data)
        os.fsync(fd)
    except OSError:
        _cut_quietly(fd, size)
        raise
    return Appended(path, size, size + len(data), before if whole else None), lines


def _cut_quietly(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the first error is the one to report; a torn line is skipped on read


def _scan(fd: int, size: int, start: int = 0) -> tuple[int, bool]:
    """(count of line ends from `start` on, whether the file ends with one) without reading it
    whole."""
    count, last = 0, b"\n"
    for offset in range(start, size, _CHUNK):
        chunk = os.pread(fd, _CHUNK, offset)
        count += chunk.count(b"\n")
        last = chunk[-1:] or last
    return count, last == b"\n"


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
