"""Retention on the SQLite store (`state.retention_days`): the sweep, on real files.

Time is given: each sweep takes `now`, and the threads' activity is written at chosen times.
"""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from proxy.records import ThreadKey
from proxy.store import HistoryFiles, SqliteStore
from proxy.store.cached import CachedStore
from proxy.store.retention import Sweeper, sweeper_for
from proxy.store.sqlite_db import StateDb
from tests.process import child_env
from tests.store_backends import LogLines, anchor, event, mark

DAY = 86_400.0
RETENTION = 30 * DAY
LONG_AGO = 1_700_000_000.0
NOW = LONG_AGO + 40 * DAY  # everything written at LONG_AGO is 40 days idle
IDLE = [ThreadKey("tenant-a", f"idle-{n}") for n in range(3)] + [ThreadKey("tenant-b", "idle-0")]
ACTIVE = ThreadKey("tenant-a", "active")
ANSWERED_LATELY = ThreadKey("tenant-a", "answered-lately")  # old touch, recent anchor
TABLES = ("threads", "anchors", "events", "history_removals")


async def whole_thread(store: SqliteStore | CachedStore, history: HistoryFiles, key: ThreadKey,
                       at: float) -> Path:
    """A thread with every kind of record, all written at `at`; returns its history file."""
    store.record_request(key, at, 1234)
    for n in range(3):
        store.add_anchor(key, anchor(n, at))
    message = {"role": "user", "content": "x" * 500}
    appended = await history.offload_async(key, [{"id": "m1", "message": message}], at)
    await store.add_event(key, event(1, at=at))
    await store.set_microcompact(key, mark(1))
    await store.flush()
    return Path(appended.path)


def rows(root: Path, key: ThreadKey | None = None) -> dict[str, int]:
    """Rows per table, of one thread or of all."""
    with closing(sqlite3.connect(root / "state.db")) as conn:
        if key is None:
            return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
        return {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant = ? AND thread = ?",
                                key).fetchone()[0] for t in TABLES}


@pytest.fixture
async def state(tmp_path: Path) -> Any:
    """An open cached SQLite store over `tmp_path`, its history files and a sweeper."""
    store = SqliteStore(tmp_path)
    cache = CachedStore(store)
    await cache.open()
    history = HistoryFiles.under(tmp_path)
    log = LogLines()
    try:
        yield cache, history, Sweeper(cache, store, RETENTION, log), log
    finally:
        await cache.close()


async def test_a_sweep_removes_exactly_the_idle_threads_with_all_their_rows_and_files(
        tmp_path: Path, state: Any) -> None:
    cache, history, sweeper, log = state
    files = {key: await whole_thread(cache.store, history, key, LONG_AGO) for key in IDLE}
    kept_file = await whole_thread(cache.store, history, ACTIVE, NOW - 29 * DAY)
    await whole_thread(cache.store, history, ANSWERED_LATELY, LONG_AGO)
    cache.store.add_anchor(ANSWERED_LATELY, anchor(9, NOW - DAY))  # its touch came late
    await cache.store.flush()
    before = {key: await cache.store.load(key) for key in (ACTIVE, ANSWERED_LATELY)}
    sizes = sum(path.stat().st_size for path in files.values())

    freed = await sweeper.sweep(NOW)

    assert (freed.threads, freed.files, freed.bytes) == (len(IDLE), len(IDLE), sizes)
    for key in IDLE:
        assert rows(tmp_path, key) == dict.fromkeys(TABLES, 0)
        assert not files[key].exists()
        assert not (await cache.load(key)).known
    for key, state_before in before.items():
        assert await cache.store.load(key) == state_before
        assert rows(tmp_path, key)["anchors"] > 0
    assert kept_file.exists()
    [line] = log.named("state_swept")
    assert line["threads"] == len(IDLE) and line["files"] == len(IDLE) and line["bytes"] == sizes
    assert line["kept_in_use"] == 0 and line["retention_days"] == 30
    assert not any("idle" in str(value) for value in line.values())  # counts, never ids


async def test_a_thread_idle_just_under_the_retention_stays(tmp_path: Path, state: Any) -> None:
    cache, history, sweeper, _ = state
    await whole_thread(cache.store, history, ACTIVE, NOW - RETENTION + 1)
    await whole_thread(cache.store, history, IDLE[0], NOW - RETENTION - 1)
    freed = await sweeper.sweep(NOW)
    assert freed.threads == 1
    assert rows(tmp_path, ACTIVE)["threads"] == 1 and rows(tmp_path, IDLE[0])["threads"] == 0


async def test_a_thread_the_process_read_since_the_previous_sweep_began_is_kept(
        tmp_path: Path, state: Any) -> None:
    """A request reads its thread first; its touch is written only after its compaction, and
    late: the read alone keeps the thread, whatever the store says of its activity."""
    cache, history, sweeper, log = state
    for key in IDLE[:2]:
        await whole_thread(cache.store, history, key, LONG_AGO)
    await sweeper.sweep(LONG_AGO + DAY)  # a sweep began: reads from here on are noted
    in_use = IDLE[0]
    assert (await cache.load(in_use)).known  # a request has begun with it
    freed = await sweeper.sweep(NOW)
    assert freed.threads == 1 and rows(tmp_path, in_use)["threads"] == 1
    assert log.named("state_swept")[-1]["kept_in_use"] == 1
    assert cache.cached(in_use) is not None  # read from the cache, as a request would
    assert (await sweeper.sweep(NOW)).threads == 0  # read again since the last sweep began
    freed = await sweeper.sweep(NOW)  # no read since the previous sweep began
    assert freed.threads == 1 and rows(tmp_path, in_use)["threads"] == 0
    assert cache.cached(in_use) is None  # dropped from the cache with it


async def test_a_thread_with_a_touch_held_back_is_kept(tmp_path: Path, state: Any) -> None:
    cache, history, sweeper, _ = state
    await whole_thread(cache.store, history, IDLE[0], LONG_AGO)
    await sweeper.sweep(LONG_AGO + DAY)
    cache.record_request(IDLE[0], LONG_AGO + 1, 5)  # persisted: the first touch of the process
    cache.record_request(IDLE[0], LONG_AGO + 2, 6)  # held back (`TOUCH_INTERVAL_S`)
    await sweeper.sweep(NOW)
    await sweeper.sweep(NOW)
    assert rows(tmp_path, IDLE[0])["threads"] == 1


async def test_a_removed_thread_comes_back_empty_and_is_written_whole_again(
        tmp_path: Path, state: Any) -> None:
    """Its anchors' rows and the store's memory of its row are gone with it: a new anchor
    makes the row again (the store skips that for threads it knows have one)."""
    cache, history, sweeper, _ = state
    key = IDLE[0]
    await whole_thread(cache, history, key, LONG_AGO)  # through the cache: it holds the state
    assert (await cache.load(key)).event is not None  # cached (no sweep began: not noted)
    assert (await sweeper.sweep(NOW)).threads == 1
    fresh = await cache.load(key)
    assert not fresh.known and fresh.event is None and fresh.microcompact is None
    cache.add_anchor(key, anchor(7, NOW))
    await cache.flush()
    back = await cache.store.load(key)
    assert back.known and [a.position for a in back.anchors] == [7] and back.event_count == 0
    appended = await history.offload_async(key, [{"id": "n1", "message": {}}], NOW)
    assert history.read(appended.path).records[0]["seq"] == 1  # a new file, counted afresh


async def test_a_touch_written_after_the_threads_were_found_keeps_its_thread(
        tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        await whole_thread(store, HistoryFiles.under(tmp_path), IDLE[0], LONG_AGO)
        before = NOW - RETENTION
        found = await store.idle_threads(before, None, 10)
        assert found == [IDLE[0]]
        store.record_request(IDLE[0], NOW, None)  # the request came meanwhile
        assert (await store.remove_threads(found, before)).threads == 0
        assert rows(tmp_path, IDLE[0])["events"] == 1
    finally:
        await store.close()


async def test_a_big_sweep_goes_in_batches_and_misses_none(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    cache = CachedStore(store)
    await cache.open()
    batches: list[int] = []
    remove = store.remove_threads

    async def counted(keys: Any, before: float) -> Any:
        batches.append(len(keys))
        return await remove(keys, before)

    store.remove_threads = counted  # type: ignore[method-assign]
    try:
        for n in range(250):
            store.record_request(ThreadKey(f"tenant-{n % 3}", f"t-{n:03d}"), LONG_AGO, None)
        store.record_request(ACTIVE, NOW, None)
        await store.flush()
        sweeper = Sweeper(cache, store, RETENTION, LogLines(), batch=100)
        await sweeper.sweep(LONG_AGO)  # nothing idle yet; reads from here on are noted
        in_use = sorted(ThreadKey(f"tenant-{n % 3}", f"t-{n:03d}") for n in range(250))[:120]
        for key in in_use:  # more than a batch, first in key order: the sweep goes past them
            await cache.load(key)
        freed = await asyncio.wait_for(sweeper.sweep(NOW), 30)
        assert freed.threads == 130 and batches == [80, 50]  # none of a batch all in use
        assert rows(tmp_path)["threads"] == 121
        # No read since the previous sweep began: they go now.
        assert (await sweeper.sweep(NOW)).threads == 120 and rows(tmp_path)["threads"] == 1
        assert batches == [80, 50, 100, 20]
    finally:
        await cache.close()


def test_zero_days_sweeps_nothing(tmp_path: Path) -> None:
    assert sweeper_for(CachedStore(SqliteStore(tmp_path)), 0.0) is None
    assert sweeper_for(CachedStore(SqliteStore(tmp_path)), RETENTION) is not None


# -------------------------------------------------------------- a kill in the middle of one

KILLED_SWEEP = """
import asyncio, os, sys
from proxy.store import SqliteStore
from proxy.store import sqlite_sweep

def killed(*args, **kwargs):
    os._exit(9)

if sys.argv[2] == "before_the_files":
    sqlite_sweep.remove_history = killed
else:  # before the commit: every row deleted, the transaction still open
    delete_rows = sqlite_sweep._delete_rows
    sqlite_sweep._delete_rows = lambda *args: (delete_rows(*args), killed())

async def main():
    store = SqliteStore(sys.argv[1])
    await store.open()
    before = float(sys.argv[3])
    await store.remove_threads(await store.idle_threads(before, None, 100), before)

asyncio.run(main())
"""


def killed_sweep(root: Path, where: str) -> None:
    """Sweep `root` in a child killed (no clean-up of any kind) at `where`."""
    child = subprocess.run([sys.executable, "-c", KILLED_SWEEP, str(root), where,
                            str(NOW - RETENTION)], env=child_env(), timeout=60)
    assert child.returncode == 9


async def filled(root: Path) -> dict[ThreadKey, Path]:
    store = SqliteStore(root)
    await store.open()
    try:
        return {key: await whole_thread(store, HistoryFiles.under(root), key, LONG_AGO)
                for key in IDLE[:2]}
    finally:
        await store.close()


async def test_a_kill_between_the_rows_and_the_files_leaves_files_the_next_open_deletes(
        tmp_path: Path) -> None:
    files = await filled(tmp_path)
    killed_sweep(tmp_path, "before_the_files")  # the rows committed, no file deleted yet
    assert rows(tmp_path)["threads"] == 0 and rows(tmp_path)["history_removals"] == 2
    assert all(path.exists() for path in files.values())
    log = LogLines()
    store = SqliteStore(tmp_path, log=log)
    await store.open()
    try:
        assert not any(path.exists() for path in files.values())
        assert rows(tmp_path) == dict.fromkeys(TABLES, 0)
        [line] = log.named("state_swept")
        assert line["files"] == 2 and line["interrupted"] is True
    finally:
        await store.close()


async def test_a_kill_inside_the_transaction_removes_nothing(tmp_path: Path) -> None:
    files = await filled(tmp_path)
    before = rows(tmp_path)
    killed_sweep(tmp_path, "before_the_commit")
    assert rows(tmp_path) == before and before["threads"] == 2  # rolled back whole
    assert all(path.exists() for path in files.values())
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        for key in files:
            assert (await store.load(key)).event is not None
    finally:
        await store.close()


async def test_a_left_removal_of_a_thread_that_has_a_row_again_keeps_its_file(
        tmp_path: Path) -> None:
    files = await filled(tmp_path)
    key = IDLE[0]
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn, conn:
        conn.execute("INSERT INTO history_removals VALUES (?, ?)", key)
    store = SqliteStore(tmp_path)
    await store.open()
    await store.close()
    assert files[key].exists() and rows(tmp_path)["history_removals"] == 0


def test_the_database_forgets_which_threads_have_rows(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write(db.add_anchor, IDLE[0], anchor(1, LONG_AGO))
        db.forget_threads([IDLE[0]])
        with closing(db.conn.cursor()) as cursor:
            cursor.execute("DELETE FROM threads")
        db.write(db.add_anchor, IDLE[0], anchor(2, LONG_AGO))
        assert db.load(IDLE[0]).known
    finally:
        db.close()
