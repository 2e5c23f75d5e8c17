"""Schema version 4: each anchor's time in a column of its own, in the index the listing reads.

`threads` lists the most recently active threads, a thread's activity being the later of its
touch and its newest anchor's time (as `load` gives it). Before version 4 the listing read
every thread's newest anchor (its row and its JSON) to find that; from 4 it reads the time from
the anchors' index alone. The results are the same: same threads, order and times, on a state
written by the proxy and on one migrated from version 3. An older state read beside the proxy
that still serves it (`threads` during an upgrade) is listed the old way.
"""

from __future__ import annotations

import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.records import Anchor, ThreadKey
from proxy.store import open_read_only
from proxy.store.db_file import DB_FILE
from proxy.store.jsoncodec import dumps_text
from proxy.store.schema import ANCHOR_TIMES_FROM, MIGRATIONS, current_version, migrate
from proxy.store.sqlite_db import (_LIST_THREADS, _LIST_THREADS_READING_ANCHORS, AnchorWrite,
                                   StateDb)

# The tables as schema version 3 made them, written out so that a later change to the
# migrations cannot change what this test upgrades.
SCHEMA_3 = """
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);
CREATE TABLE threads (
    tenant TEXT NOT NULL, thread TEXT NOT NULL, created_at REAL NOT NULL,
    last_activity REAL NOT NULL, last_estimate INTEGER,
    event_count INTEGER NOT NULL DEFAULT 0, microcompact TEXT,
    PRIMARY KEY (tenant, thread)) WITHOUT ROWID;
CREATE INDEX threads_by_thread ON threads (thread);
CREATE INDEX threads_by_activity ON threads (last_activity);
CREATE TABLE anchors (
    id INTEGER PRIMARY KEY, tenant TEXT NOT NULL, thread TEXT NOT NULL, data TEXT NOT NULL);
CREATE INDEX anchors_by_thread ON anchors (tenant, thread, id);
CREATE TABLE events (
    tenant TEXT NOT NULL, thread TEXT NOT NULL, seq INTEGER NOT NULL,
    created_at REAL NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (tenant, thread, seq)) WITHOUT ROWID;
CREATE TABLE origins (id TEXT PRIMARY KEY, upstream TEXT NOT NULL, made_at REAL NOT NULL)
    WITHOUT ROWID;
CREATE INDEX origins_by_age ON origins (made_at);
INSERT INTO schema_version VALUES (1, 0), (2, 0), (3, 0);
"""

# (thread, touched at, [anchor times, oldest written first]): answers later than the touch (a
# touch held back), earlier (the touch stands), none, an anchor older than one before it (a
# clock stepped back: the newest written counts, not the latest time), an unreadable anchor.
THREADS = [("later-answer", 1000.0, [1001.0, 1500.0]), ("touch-stands", 1400.0, [1100.0]),
           ("no-anchor", 1300.0, []), ("clock-back", 1000.0, [1600.0, 1200.0]),
           ("unreadable", 1050.0, ["not json"])]


def anchor(n: int, at: float) -> Anchor:
    return Anchor((f"r{n}",), n, f"p{n}", 100 + n, 5, model="m", created_at=at)


def schema3_state(root: Path) -> Path:
    """A version 3 state holding `THREADS`, its rows as the version 3 proxy wrote them."""
    root.mkdir(mode=0o700, exist_ok=True)
    path = root / DB_FILE
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA_3)
        for n, (thread, touched, times) in enumerate(THREADS):
            conn.execute("INSERT INTO threads (tenant, thread, created_at, last_activity, "
                         "last_estimate) VALUES ('t', ?, 900, ?, ?)", (thread, touched, n))
            for m, at in enumerate(times):
                data = at if isinstance(at, str) else dumps_text(anchor(m, at).to_data())
                conn.execute("INSERT INTO anchors (tenant, thread, data) VALUES ('t', ?, ?)",
                             (thread, data))
    return path


def listed(db: StateDb, limit: int = 100) -> list[tuple[Any, ...]]:
    return [(s.thread, s.tenant, s.created_at, s.last_activity, s.event_count, s.last_estimate)
            for s in db.list_threads(limit)]


def listed_reading_anchors(db: StateDb, limit: int = 100) -> list[tuple[Any, ...]]:
    """The listing as the proxy made it before version 4."""
    return db.conn.execute(_LIST_THREADS_READING_ANCHORS, (limit,)).fetchall()


EXPECTED = [("clock-back", "t", 900.0, 1200.0, 0, 3), ("later-answer", "t", 900.0, 1500.0, 0, 0),
            ("touch-stands", "t", 900.0, 1400.0, 0, 1), ("no-anchor", "t", 900.0, 1300.0, 0, 2),
            ("unreadable", "t", 900.0, 1050.0, 0, 4)]
EXPECTED.sort(key=lambda row: -row[3])


def test_a_version_3_state_lists_the_same_threads_after_the_migration(tmp_path: Path) -> None:
    path = schema3_state(tmp_path)
    with closing(open_read_only(tmp_path)) as reader:  # beside the version 3 proxy
        assert listed(reader) == EXPECTED
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert migrate(conn) == len(MIGRATIONS) >= ANCHOR_TIMES_FROM
        db = StateDb(conn)
        assert listed(db) == EXPECTED == listed_reading_anchors(db)
        assert listed(db, 2) == EXPECTED[:2]
        # The listing's activity is what `load` (and `inspect`) give each thread.
        assert all(db.load(ThreadKey("t", row[0])).last_activity == row[3]
                   for row in EXPECTED if row[0] != "unreadable")
        indexes = {name for (name,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'threads'")}
        assert "threads_by_activity" not in indexes  # nothing read it; every touch paid
        assert [row[2] for row in conn.execute("PRAGMA index_info(anchors_by_thread)")] == [
            "tenant", "thread", "id", "created_at"]
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]


def test_a_downgrade_and_a_new_upgrade_recompute_the_newest_anchor_times(tmp_path: Path) -> None:
    """Downgrading to 3 leaves the column, which a version 3 proxy does not fill: the step to 4
    runs again on the next upgrade and fills the anchors written meanwhile."""
    path = schema3_state(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        migrate(conn)
        conn.execute("DELETE FROM schema_version WHERE version > 3")
        conn.execute("INSERT INTO anchors (tenant, thread, data) VALUES ('t', 'no-anchor', ?)",
                     (dumps_text(anchor(9, 1700.0).to_data()),))  # as version 3 writes one
        db = StateDb(conn)
        assert listed(db)[0][:4] == ("no-anchor", "t", 900.0, 1700.0)  # read the old way
        assert migrate(conn) == len(MIGRATIONS)
        assert listed(db) == listed_reading_anchors(db)
        assert listed(db)[0][:4] == ("no-anchor", "t", 900.0, 1700.0)


def test_a_failed_step_leaves_version_3_as_it_was(tmp_path: Path) -> None:
    path = schema3_state(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        before = conn.execute("SELECT * FROM threads ORDER BY thread").fetchall()

        def failing(conn: sqlite3.Connection) -> None:
            MIGRATIONS[ANCHOR_TIMES_FROM - 1](conn)
            raise sqlite3.OperationalError("disk I/O error (injected)")

        with pytest.raises(sqlite3.OperationalError):
            migrate(conn, (*MIGRATIONS[:ANCHOR_TIMES_FROM - 1], failing))
        assert current_version(conn) == 3
        assert conn.execute("SELECT * FROM threads ORDER BY thread").fetchall() == before
        assert migrate(conn) == len(MIGRATIONS) and listed(StateDb(conn)) == EXPECTED


# Writes as the proxy queues them: (thread, touch time) or (thread, anchor time), in batches.
writes = st.lists(st.lists(st.tuples(st.sampled_from("abcd"), st.booleans(),
                                     st.integers(0, 40).map(float)), max_size=8), max_size=8)


@settings(max_examples=60, deadline=None)
@given(writes, st.integers(1, 5))
def test_the_listing_is_what_reading_every_anchor_gives(
        batches: list[list[tuple[str, bool, float]]], limit: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = StateDb.connect(Path(tmp), anchors_kept=2)
        try:
            for n, batch in enumerate(batches):
                queued: list[Any] = []
                for m, (thread, is_anchor, at) in enumerate(batch):
                    key = ThreadKey("t", thread)
                    queued.append(AnchorWrite(db, key, anchor(10 * n + m, at)) if is_anchor
                                  else (lambda key=key, at=at: db.touch(key, at, None)))
                db.write_batch(queued)
            everything = listed(db)
            assert sorted(everything) == sorted(listed_reading_anchors(db))
            # Ties may come in any order: the times, in order, are the same.
            assert [row[3] for row in listed(db, limit)] == [
                row[3] for row in listed_reading_anchors(db, limit)]
            for row in everything:
                assert db.load(ThreadKey("t", row[0])).last_activity == row[3]
        finally:
            db.close()


def test_the_listing_reads_the_anchors_index_not_their_rows(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write(db.touch, ThreadKey("t", "a"), 1000.0, None)
        db.write_batch([AnchorWrite(db, ThreadKey("t", "a"), anchor(1, 1001.0))])
        read: list[tuple[str, str]] = []

        def reads(action: int, table: str | None, column: str | None, *_: object) -> int:
            if action == sqlite3.SQLITE_READ and table is not None:
                read.append((table, column or ""))
            return sqlite3.SQLITE_OK

        db.conn.set_authorizer(reads)
        try:
            assert [s.last_activity for s in db.list_threads(10)] == [1001.0]
        finally:
            db.conn.set_authorizer(None)
        assert ("anchors", "data") not in read and ("anchors", "created_at") in read, read
        plan = " ".join(row[3] for row in db.conn.execute(
            "EXPLAIN QUERY PLAN " + _LIST_THREADS, (10,)))
        assert "COVERING INDEX anchors_by_thread" in plan, plan
    finally:
        db.close()
