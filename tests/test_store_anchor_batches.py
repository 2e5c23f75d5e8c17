"""A batch of queued anchors (`StateDb.write_batch`): all threads' together, in few inserts of
many rows each (a batch of one, a single insert), and the same rows as the store wrote thread
after thread (which thread holds which anchors, in which order, and when each thread's old rows
are pruned)."""

from __future__ import annotations

import sqlite3
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.records import Anchor, ThreadKey
from proxy.store.sqlite_db import AnchorWrite, StateDb

KEPT = 3


def anchor(n: int) -> Anchor:
    return Anchor((f"r{n}",), n, f"p{n}", 100 + n, 5, model="m", created_at=10.0 + n)


def rows(db: StateDb) -> list[tuple[str, str, str, float]]:
    """Every anchor row, per thread in insertion order (ids across threads may interleave)."""
    return db.conn.execute("SELECT tenant, thread, data, created_at FROM anchors "
                           "ORDER BY tenant, thread, id").fetchall()


def threads(db: StateDb) -> list[tuple[Any, ...]]:
    return db.conn.execute("SELECT * FROM threads ORDER BY tenant, thread").fetchall()


class CountingConnection:
    """A connection that counts the statements of anchor inserts run on it (`execute` or
    `executemany`) and the rows they name, and passes everything through."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.inserts: list[int] = []  # rows per statement

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.startswith("INSERT INTO anchors"):
            self.inserts.append(sql.count("(?, ?, ?, ?)"))
        return self._conn.execute(sql, params)

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        params = list(params)
        if sql.startswith("INSERT INTO anchors"):
            self.inserts.extend([1] * len(params))  # a step per row, as many statements
        return self._conn.executemany(sql, params)

    def cursor(self) -> CountingConnection:
        return self  # the store's write cursor is where the anchors' insert runs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_the_anchors_of_several_threads_in_a_batch_are_one_insert(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    counting = CountingConnection(db.conn)
    db.conn = counting  # type: ignore[assignment]
    db.write_batch([AnchorWrite(db, ThreadKey("t", f"thread-{i}"), anchor(i)) for i in range(8)])
    assert counting.inserts == [8]
    assert len(rows(db)) == 8 and len(threads(db)) == 8


@pytest.mark.parametrize("count", [2, 3, 127, 128, 129, 300, 1000])
def test_a_big_batch_is_few_inserts_of_many_rows_and_the_rows_one_by_one_writes_make(
        tmp_path: Path, count: int) -> None:
    # sqlite3 lets go of the GIL for each step of a statement: a step per row made the store's
    # worker wait for the busy event loop's GIL after every anchor.
    batched, alone = StateDb.connect(tmp_path / "batched"), StateDb.connect(tmp_path / "alone")
    counting = CountingConnection(batched.conn)
    batched.conn = counting  # type: ignore[assignment]
    keys = [ThreadKey("t", f"thread-{i % (count - 1 or 1)}") for i in range(count)]
    batched.write_batch([AnchorWrite(batched, key, anchor(i)) for i, key in enumerate(keys)])
    for i, key in enumerate(keys):
        alone.write_batch([AnchorWrite(alone, key, anchor(i))])
    assert rows(batched) == rows(alone)
    assert threads(batched) == threads(alone)
    assert sum(counting.inserts) == len(rows(batched))
    # Largest first, by powers of two up to 128 rows (512 parameters): at most one statement
    # per bit of the count, plus one per 128 rows.
    assert counting.inserts == sorted(counting.inserts, reverse=True)
    assert all(n & (n - 1) == 0 and n <= 128 for n in counting.inserts)
    assert len(counting.inserts) <= len(rows(batched)) // 128 + 7
    for db in (batched, alone):
        db.close()


def reference_batch(db: StateDb, batch: list[tuple[int, int]], counts: dict[ThreadKey, int],
                    touch: bool) -> None:
    """A batch as the store wrote it thread after thread: the other writes first, then each
    thread's newest `KEPT` anchors of the batch, its row made if not known, its old rows
    pruned once `KEPT` were added since the last prune (`counts`)."""
    def written() -> None:
        if touch:
            db.touch(ThreadKey("t", "th0"), 5.0, 7)
        for t in dict.fromkeys(t for t, _ in batch):
            key = ThreadKey("t", f"th{t}")
            anchors = [anchor(n) for u, n in batch if u == t][-KEPT:]
            if key not in counts:
                db._ensure_thread(key, anchors[0].created_at)
            for each in anchors:
                db.conn.execute("INSERT INTO anchors (tenant, thread, data, created_at) "
                                "VALUES (?, ?, ?, ?)", (key.tenant, key.thread,
                                                        orjson.dumps(each.to_data()).decode(),
                                                        each.created_at))
            counts[key] = counts.get(key, 0) + len(anchors)
            if counts[key] >= KEPT:
                db._prune(key)
                counts[key] = 0

    db.write(written)


# A batch: (thread number, anchor number) for each queued anchor, and maybe a touch among them.
batches = st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 50)), max_size=12),
                   max_size=6)


@settings(max_examples=80, deadline=None)
@given(batches, st.booleans())
def test_a_batch_leaves_the_rows_thread_after_thread_leaves(
        queued: list[list[tuple[int, int]]], touch: bool) -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as other:
        batched, alone = StateDb.connect(Path(one), KEPT), StateDb.connect(Path(other), KEPT)
        counts: dict[ThreadKey, int] = {}
        for batch in queued:
            writes: list[Any] = [AnchorWrite(batched, ThreadKey("t", f"th{t}"), anchor(n))
                                 for t, n in batch]
            if touch:
                writes.insert(len(writes) // 2, partial(batched.touch, ThreadKey("t", "th0"),
                                                        5.0, 7))
            batched.write_batch(writes)
            if batch or touch:
                reference_batch(alone, batch, counts, touch)
        assert rows(batched) == rows(alone)
        assert threads(batched) == threads(alone)
        # The same prunes to come: each thread's count since its last prune.
        assert all(batched._known.get(key) == count for key, count in counts.items())
        for db in (batched, alone):
            db.close()


def test_a_batch_stores_an_anchor_orjson_refuses_as_one_alone_is_stored(tmp_path: Path) -> None:
    # A model name with a lone surrogate: orjson refuses it, and the store's codec writes it
    # as ASCII JSON with escapes; the batch's other anchors are stored as orjson writes them.
    odd = Anchor(("r",), 1, "p", 100, 5, model="m-\ud800", created_at=10.0)
    batch = StateDb.connect(tmp_path / "batch")
    batch.write_batch([AnchorWrite(batch, ThreadKey("t", "a"), anchor(0)),
                       AnchorWrite(batch, ThreadKey("t", "b"), odd)])
    alone = StateDb.connect(tmp_path / "alone")
    for key, each in ((ThreadKey("t", "a"), anchor(0)), (ThreadKey("t", "b"), odd)):
        alone.write_batch([AnchorWrite(alone, key, each)])
    assert rows(batch) == rows(alone)
    assert batch._anchors(ThreadKey("t", "b")) == (odd,)


async def test_the_store_queues_each_anchor_as_an_anchor_write(tmp_path: Path) -> None:
    """`add_anchor` queues an `AnchorWrite` (built without its class's `__new__`), which is
    what lets `write_batch` group the answers' anchors into one insert."""
    from proxy.store.sqlite import SqliteStore

    store = SqliteStore(tmp_path / "state")
    await store.open()
    queued: list[Any] = []
    store._enqueue = queued.append  # type: ignore[method-assign]
    try:
        store.add_anchor(ThreadKey("t", "a"), anchor(1))
        [write] = queued
        assert type(write) is AnchorWrite
        assert isinstance(write.db, StateDb)
        assert (write.key, write.anchor) == (ThreadKey("t", "a"), anchor(1))
    finally:
        del store._enqueue
        await store.close()
