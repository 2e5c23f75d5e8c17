"""A thread's last activity after a kill: the touches held back are lost, its answers are not.

`CachedStore` writes a thread's touch at most every `TOUCH_INTERVAL_S`; the ones it holds back
live in memory only. Each answer's anchor is queued at once, so the store reads a thread's
newest anchor time as its last activity when that is later than the persisted touch.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from proxy.records import Anchor, ThreadKey
from proxy.store import SqliteStore
from proxy.store.cached import TOUCH_INTERVAL_S, CachedStore
from proxy.store.schema import ANCHOR_TIMES_FROM
from proxy.store.sqlite_db import StateDb

KEY, OTHER, LATER = ThreadKey("t", "answered"), ThreadKey("t", "other"), ThreadKey("t", "later")


def anchor(n: int, at: float) -> Anchor:
    return Anchor((f"r{n}",), n, f"p{n}", 100 + n, 5, model="m", created_at=at)


async def killed_after(root: Path) -> None:
    """Requests on three threads; then the store stops the way a kill leaves it: queued
    writes on disk (a kill after their few milliseconds), the held-back touches gone."""
    sqlite = SqliteStore(root)
    cached = CachedStore(sqlite)
    await cached.open()
    cached.record_request(KEY, 1000.0, 50)  # persisted: the thread's first
    cached.record_request(OTHER, 1010.0, 70)
    cached.record_request(KEY, 1000.0 + TOUCH_INTERVAL_S / 2, 60)  # held back
    cached.add_anchor(KEY, anchor(1, 1000.0 + TOUCH_INTERVAL_S / 2 + 1))
    cached.record_request(LATER, 2000.0, 80)
    cached.add_anchor(LATER, anchor(2, 1500.0))  # older than the touch: the touch stands
    await sqlite.close()  # not `cached.close`: that would write the held touch


async def test_load_reads_the_newest_answer_as_activity_after_a_kill(tmp_path: Path) -> None:
    await killed_after(tmp_path)
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        answered = await store.load(KEY)
        assert answered.last_activity == 1000.0 + TOUCH_INTERVAL_S / 2 + 1
        assert answered.last_estimate == 50  # the held estimate is lost with its touch
        assert (await store.load(OTHER)).last_activity == 1010.0  # no anchor
        assert (await store.load(LATER)).last_activity == 2000.0
    finally:
        await store.close()


async def test_the_thread_list_orders_and_shows_the_same_activity(tmp_path: Path) -> None:
    await killed_after(tmp_path)
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        listed = [(s.thread, s.last_activity) for s in await store.list_threads(10)]
    finally:
        await store.close()
    assert listed == [("later", 2000.0), ("answered", 1000.0 + TOUCH_INTERVAL_S / 2 + 1),
                      ("other", 1010.0)]


@pytest.mark.parametrize("version", [ANCHOR_TIMES_FROM - 1, ANCHOR_TIMES_FROM])
def test_a_damaged_anchor_does_not_fail_the_thread_list(tmp_path: Path, version: int) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write(db.touch, KEY, 1000.0, 5)
        db.write(db.add_anchor, KEY, anchor(1, 1200.0))
        db.conn.execute("UPDATE anchors SET data = 'not json'")
        # Read as a state of that version (`threads` beside an older proxy reads anchors).
        db.conn.execute("DELETE FROM schema_version WHERE version > ?", (version,))
        [summary] = db.list_threads(10)
        # The older state's listing skips the unreadable anchor; the newer one reads its time
        # from the index, as it was written.
        expected = 1200.0 if version >= ANCHOR_TIMES_FROM else 1000.0
        assert summary.thread == KEY.thread and summary.last_activity == expected
    finally:
        db.close()
