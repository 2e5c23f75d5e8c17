"""A thread's newer touch, written while the task's batch of held touches is in flight, is not
overwritten by that batch's older one.

The worker drains the queued writes before it runs the batch, so a touch of the same thread
queued meanwhile (pushed out by the bound, or due again) would reach the database first and
the batch's older estimate would stay. Each test pauses the batch, makes the cache write the
newer touch out, lets the worker drain the queue, then lets the batch go.
"""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store import SqliteStore, open_read_only
from proxy.store.base import Touch
from proxy.store.cached import CachedStore

KEY = ThreadKey("tenant-a", "thread-1")
EVERY_S = 0.05


def on_disk(root: Path, key: ThreadKey = KEY) -> tuple[float, int | None]:
    with closing(open_read_only(root)) as db:
        state = db.load(key)
    return state.last_activity, state.last_estimate


class Paused(SqliteStore):
    """A SQLite store whose batch of held touches waits for `go`; with `fail`, it then fails."""

    def __init__(self, root: Path, fail: bool = False) -> None:
        super().__init__(root)
        self.waiting = asyncio.Event()
        self.go = asyncio.Event()
        self.fail = fail

    async def record_requests(self, touches: list[Touch]) -> None:  # type: ignore[override]
        self.waiting.set()
        await self.go.wait()
        if self.fail:
            self.fail = False
            raise sqlite3.OperationalError("database or disk is full")
        await super().record_requests(touches)


async def in_flight(tmp_path: Path, fail: bool = False) -> tuple[Paused, CachedStore]:
    """A cache bounded at two held touches whose task holds KEY's (1001.0, 900) in flight."""
    paused = Paused(tmp_path, fail)
    store = CachedStore(paused, max_threads=2, write_held_every_s=EVERY_S)
    await store.open()
    store.record_request(KEY, 1000.0, 331)  # written
    store.record_request(KEY, 1001.0, 900)  # held back, then in the task's batch
    await asyncio.wait_for(paused.waiting.wait(), 5.0)
    return paused, store


async def drained(paused: Paused) -> None:
    """Until the worker took every queued write: a job posted later runs after them."""
    for _ in range(500):
        if paused.writer.pending == 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the queued writes were not drained")


def push_out_by_the_bound(store: CachedStore) -> None:
    """Two other threads' held touches: KEY's, the oldest held, is written out."""
    for n in (2, 3):
        other = ThreadKey("tenant-a", f"thread-{n}")
        store.record_request(other, 1000.0, n)
        store.record_request(other, 1001.0, n)


async def test_a_touch_pushed_out_by_the_bound_lands_after_the_batch_in_flight(
        tmp_path: Path) -> None:
    paused, store = await in_flight(tmp_path)
    store.record_request(KEY, 1002.0, 1435)  # held (the batch counts as persisted)
    push_out_by_the_bound(store)
    await drained(paused)
    paused.go.set()
    await store.close()
    assert on_disk(tmp_path) == (1002.0, 1435)


async def test_a_touch_whose_persisted_time_was_forgotten_lands_after_the_batch_in_flight(
        tmp_path: Path) -> None:
    paused, store = await in_flight(tmp_path)
    push_out_by_the_bound(store)  # two new threads: KEY's persisted time leaves the LRU
    store.record_request(KEY, 1002.0, 1435)  # due, as far as the cache remembers
    await drained(paused)
    paused.go.set()
    await store.close()
    assert on_disk(tmp_path) == (1002.0, 1435)


async def test_a_failed_batch_held_again_does_not_overwrite_a_newer_touch_written_meanwhile(
        tmp_path: Path) -> None:
    paused, store = await in_flight(tmp_path, fail=True)
    store.record_request(KEY, 1002.0, 1435)
    push_out_by_the_bound(store)
    await drained(paused)
    paused.go.set()
    await store.close()  # writes what the failure held again
    assert on_disk(tmp_path) == (1002.0, 1435)


async def test_the_touches_held_for_the_batch_are_written_once_it_committed(
        tmp_path: Path) -> None:
    paused, store = await in_flight(tmp_path)
    store.record_request(KEY, 1002.0, 1435)
    push_out_by_the_bound(store)
    await drained(paused)
    paused.go.set()
    for _ in range(500):  # no flush, no close: the task's own end writes it
        await asyncio.sleep(0.01)
        if on_disk(tmp_path) == (1002.0, 1435):
            break
    assert on_disk(tmp_path) == (1002.0, 1435)
    await store.close()
