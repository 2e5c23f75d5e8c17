"""Held-back activity reaches the database within the interval, with no further request."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from contextlib import closing
from pathlib import Path
from typing import Any

from proxy.records import ThreadKey
from proxy.store import SqliteStore, open_read_only
from proxy.store.base import Touch
from proxy.store.cached import CachedStore

KEY = ThreadKey("tenant-a", "thread-1")
OTHER = ThreadKey("tenant-a", "thread-2")
EVERY_S = 0.05


def on_disk(root: Path) -> dict[str, tuple[float, int | None]]:
    """What `compaction-proxy threads` reads beside the running proxy."""
    with closing(open_read_only(root)) as db:
        return {s.thread: (s.last_activity, s.last_estimate) for s in db.list_threads(100)}


async def until(condition: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


class Recording(SqliteStore):
    """A SQLite store that records the touches written, and fails the next `fail` batches."""

    def __init__(self, root: Path, **kwargs: Any) -> None:
        super().__init__(root, **kwargs)
        self.written: list[tuple[ThreadKey, float, int | None]] = []
        self.fail = 0

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self.written.append((key, at, estimate))
        super().record_request(key, at, estimate)

    async def record_requests(self, touches: list[Touch]) -> None:  # type: ignore[override]
        if self.fail:
            self.fail -= 1
            raise sqlite3.OperationalError("database or disk is full")
        await super().record_requests(touches)
        self.written.extend(touches)


async def test_an_idle_threads_held_touch_reaches_the_file_within_the_interval(
        tmp_path: Path) -> None:
    store = CachedStore(SqliteStore(tmp_path), write_held_every_s=EVERY_S)
    await store.open()
    try:
        store.record_request(KEY, 1000.0, 331)  # written
        store.record_request(KEY, 1001.0, 1435)  # held back: no request follows
        store.record_request(OTHER, 1002.0, 7)
        store.record_request(OTHER, 1003.0, 8)
        assert await until(lambda: on_disk(tmp_path).get(KEY.thread) == (1001.0, 1435))
        assert on_disk(tmp_path)[OTHER.thread] == (1003.0, 8)
    finally:
        await store.close()


async def test_the_held_touches_are_written_in_one_transaction(tmp_path: Path) -> None:
    sqlite = SqliteStore(tmp_path)
    store = CachedStore(sqlite, write_held_every_s=EVERY_S)
    await store.open()
    batches: list[int] = []
    db = sqlite._require_db()
    touch_many = db.touch_many
    db.touch_many = lambda rows: (batches.append(len(rows)), touch_many(rows))[1]  # type: ignore
    try:
        for n in range(20):
            key = ThreadKey("t", f"th{n}")
            store.record_request(key, 1000.0, 1)
            store.record_request(key, 1001.0, 2)
        assert await until(lambda: sum(batches) == 20)
        assert batches == [20]
    finally:
        await store.close()


async def test_the_clean_stop_writes_a_held_touch_once(tmp_path: Path) -> None:
    recording = Recording(tmp_path)
    store = CachedStore(recording, write_held_every_s=3600.0)  # the task never wakes
    await store.open()
    store.record_request(KEY, 1000.0, 331)
    store.record_request(KEY, 1001.0, 1435)
    await store.close()
    assert recording.written == [(KEY, 1000.0, 331), (KEY, 1001.0, 1435)]
    assert on_disk(tmp_path)[KEY.thread] == (1001.0, 1435)


async def test_a_touch_the_task_wrote_is_not_written_again_at_the_stop(tmp_path: Path) -> None:
    recording = Recording(tmp_path)
    store = CachedStore(recording, write_held_every_s=EVERY_S)
    await store.open()
    store.record_request(KEY, 1000.0, 331)
    store.record_request(KEY, 1001.0, 1435)
    assert await until(lambda: len(recording.written) == 2)
    await store.close()
    assert recording.written == [(KEY, 1000.0, 331), (KEY, 1001.0, 1435)]


async def test_a_failed_write_keeps_the_touches_for_the_next(tmp_path: Path) -> None:
    recording = Recording(tmp_path)
    recording.fail = 2
    store = CachedStore(recording, write_held_every_s=EVERY_S)
    await store.open()
    try:
        store.record_request(KEY, 1000.0, 331)
        store.record_request(KEY, 1001.0, 1435)
        store.record_request(OTHER, 1000.0, 7)
        store.record_request(OTHER, 1001.0, 8)
        assert await until(lambda: recording.fail == 1)
        store.record_request(KEY, 1002.0, None)  # held again, merged with the failed one
        assert await until(lambda: len(recording.written) == 4)
        assert sorted(recording.written[2:]) == [(KEY, 1002.0, 1435), (OTHER, 1001.0, 8)]
        assert on_disk(tmp_path) == {KEY.thread: (1002.0, 1435), OTHER.thread: (1001.0, 8)}
    finally:
        await store.close()
    assert len(recording.written) == 4  # nothing left held back


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))

    error = warning


async def test_a_failing_transaction_is_logged_and_raised(tmp_path: Path) -> None:
    log = Lines()
    store = SqliteStore(tmp_path, log=log)
    await store.open()
    db = store._require_db()

    def full(rows: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")

    db.touch_many = full  # type: ignore[method-assign]
    try:
        try:
            await store.record_requests([(KEY, 1000.0, 1), (OTHER, 1000.0, 2)])
        except sqlite3.OperationalError:
            pass
        else:
            raise AssertionError("the failure was not raised")
        assert log.lines == [("state_write_failed", {"failed": 2, "error": "OperationalError",
                                                     "failed_total": 0,
                                                     "path": str(store.path)})]
    finally:
        await store.close()


class Paused(SqliteStore):
    """A SQLite store whose batch of held touches waits for `go` before it is submitted."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()

    async def record_requests(self, touches: list[Touch]) -> None:  # type: ignore[override]
        self.waiting.set()
        await self.go.wait()
        await super().record_requests(touches)


async def test_a_request_during_the_write_does_not_lose_its_newer_estimate(
        tmp_path: Path) -> None:
    paused = Paused(tmp_path)
    store = CachedStore(paused, write_held_every_s=EVERY_S)
    await store.open()
    store.record_request(KEY, 1000.0, 331)
    store.record_request(KEY, 1001.0, 900)  # held back, then in the task's write
    await asyncio.wait_for(paused.waiting.wait(), 5.0)
    # Due by the last write the thread queued, not by the one in flight: were it queued, the
    # worker would drain it before the write in flight, whose older estimate would stay.
    store.record_request(KEY, 1030.5, 1435)
    paused.go.set()
    await store.close()
    assert on_disk(tmp_path)[KEY.thread] == (1030.5, 1435)
