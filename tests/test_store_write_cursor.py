"""The statements of a queued batch run on the store's one kept cursor, which holds no lock
between batches (each statement is reset when it completes)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

from proxy.records import Anchor, ThreadKey
from proxy.store.db_file import DB_FILE
from proxy.store.sqlite_db import AnchorWrite, StateDb

KEY = ThreadKey("t", "th")


def anchor(n: int) -> Anchor:
    return Anchor((f"r{n}",), n, f"p{n}", 100 + n, 5, model="m", created_at=10.0 + n)


class CountingExecute:
    """A connection that counts the statements run through `conn.execute` (each makes and
    frees a cursor); its `cursor()` is the real connection's."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.executed: list[str] = []

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.executed.append(sql)
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_batch_of_anchors_makes_no_cursor_per_statement(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write_batch([AnchorWrite(db, KEY, anchor(0))])  # the thread's row: now known
        counting = CountingExecute(db.conn)
        db.conn = counting  # type: ignore[assignment]
        db.write_batch([AnchorWrite(db, KEY, anchor(1))])
        db.write_batch([AnchorWrite(db, KEY, anchor(2)), AnchorWrite(db, KEY, anchor(3))])
        assert counting.executed == []
        assert [a.position for a in db.load(KEY).anchors] == [3, 2, 1, 0]
    finally:
        db.close()


def test_the_kept_cursor_holds_no_lock_between_batches(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write_batch([AnchorWrite(db, KEY, anchor(0))])
        db.write_batch([AnchorWrite(db, KEY, anchor(1)), AnchorWrite(db, KEY, anchor(2))])
        with closing(sqlite3.connect(tmp_path / DB_FILE, isolation_level=None,
                                     timeout=0)) as other:
            # A checkpoint that truncates the WAL waits for no reader: busy is 0.
            assert other.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0] == 0
            other.execute("BEGIN IMMEDIATE")  # and the write lock is free
            other.execute("ROLLBACK")
        assert not db.conn.in_transaction
    finally:
        db.close()
