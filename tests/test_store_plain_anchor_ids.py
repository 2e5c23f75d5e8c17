"""Schema version 3: the `anchors` table without AUTOINCREMENT, rebuilt from a version 2 state.

The rebuild keeps every row with its id (the order the reads and prunes rely on) and the
index; it runs in the migration's one transaction, so a failure or a kill part-way leaves the
version 2 table and rows as they were, and the next start migrates again.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from proxy.records import Anchor, ThreadKey
from proxy.store import SqliteStore
from proxy.store.jsoncodec import dumps_text
from proxy.store.schema import MIGRATIONS, current_version, migrate
from proxy.store.db_file import DB_FILE
from proxy.store.sqlite_db import AnchorWrite, StateDb
from tests.process import cli, write_config

A, B, C = ThreadKey("t", "a"), ThreadKey("t", "b"), ThreadKey("u", "c")

# The tables as schema version 2 made them (migrations 1 and 2, written out here so that a
# later change to those functions cannot change what this test upgrades).
SCHEMA_2 = """
CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL);
CREATE TABLE threads (
    tenant TEXT NOT NULL, thread TEXT NOT NULL, created_at REAL NOT NULL,
    last_activity REAL NOT NULL, last_estimate INTEGER,
    event_count INTEGER NOT NULL DEFAULT 0, microcompact TEXT,
    PRIMARY KEY (tenant, thread)) WITHOUT ROWID;
CREATE INDEX threads_by_thread ON threads (thread);
CREATE INDEX threads_by_activity ON threads (last_activity);
CREATE TABLE anchors (
    id INTEGER PRIMARY KEY AUTOINCREMENT, tenant TEXT NOT NULL, thread TEXT NOT NULL,
    data TEXT NOT NULL);
CREATE INDEX anchors_by_thread ON anchors (tenant, thread, id);
CREATE TABLE events (
    tenant TEXT NOT NULL, thread TEXT NOT NULL, seq INTEGER NOT NULL,
    created_at REAL NOT NULL, data TEXT NOT NULL,
    PRIMARY KEY (tenant, thread, seq)) WITHOUT ROWID;
CREATE TABLE origins (id TEXT PRIMARY KEY, upstream TEXT NOT NULL, made_at REAL NOT NULL)
    WITHOUT ROWID;
CREATE INDEX origins_by_age ON origins (made_at);
INSERT INTO schema_version VALUES (1, 0), (2, 0);
"""
# Ids with the gaps that prunes leave, threads interleaved.
ROWS = [(3, A), (4, B), (5, A), (6, B), (9, A), (10, C), (12, A)]


def anchor(n: int) -> Anchor:
    return Anchor((f"r{n}",), n, f"p{n}", 100 + n, 5, model="m", created_at=1000.0 + n)


def schema2_state(root: Path, filler: int = 0) -> Path:
    """A version 2 state holding `ROWS`, then `filler` more anchors (a copy long enough to
    stop in the middle of)."""
    root.mkdir(mode=0o700, exist_ok=True)
    path = root / DB_FILE
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(SCHEMA_2)
        for key in {key for _, key in ROWS}:
            conn.execute("INSERT INTO threads (tenant, thread, created_at, last_activity) "
                         "VALUES (?, ?, 1000, 1000)", (key.tenant, key.thread))
        conn.executemany("INSERT INTO anchors VALUES (?, ?, ?, ?)",
                         [(i, key.tenant, key.thread, dumps_text(anchor(i).to_data()))
                          for i, key in ROWS])
        conn.executemany("INSERT INTO anchors (tenant, thread, data) VALUES (?, ?, ?)",
                         [(C.tenant, C.thread, "{}")] * filler)
    return path


def anchor_rows(conn: sqlite3.Connection) -> list[tuple[Any, ...]]:
    return conn.execute("SELECT id, tenant, thread, data FROM anchors ORDER BY id").fetchall()


def anchors_sql(conn: sqlite3.Connection) -> str:
    return conn.execute("SELECT sql FROM sqlite_master WHERE name = 'anchors'").fetchone()[0]


def index_columns(conn: sqlite3.Connection) -> list[str]:
    return [row[2] for row in conn.execute("PRAGMA index_info(anchors_by_thread)")]


def tables(conn: sqlite3.Connection) -> list[str]:
    return [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]


def test_a_version_2_state_is_rebuilt_with_its_rows_ids_and_index(tmp_path: Path) -> None:
    path = schema2_state(tmp_path)
    with closing(sqlite3.connect(path)) as conn:
        before, tables_before = anchor_rows(conn), tables(conn)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert migrate(conn) == len(MIGRATIONS) >= 3
        assert "AUTOINCREMENT" not in anchors_sql(conn).upper()
        assert anchor_rows(conn) == before
        assert index_columns(conn) == ["tenant", "thread", "id", "created_at"]  # schema 4 adds the time
        # No table left over from the rebuild; schema 5 adds `history_removals` (retention).
        assert tables(conn) == sorted([*tables_before, "history_removals"])
        assert conn.execute("SELECT count(*) FROM sqlite_sequence WHERE name = 'anchors'"
                            ).fetchone() == (0,)
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        # A thread's anchors still come newest first, and a new one follows the newest id.
        db = StateDb(conn, anchors_kept=16)
        assert db.load(A).anchors == tuple(anchor(i) for i in (12, 9, 5, 3))
        db.write_batch([AnchorWrite(db, B, anchor(13))])
        assert anchor_rows(conn)[-1][:3] == (13, B.tenant, B.thread)
        assert db.load(B).anchors == (anchor(13), anchor(6), anchor(4))


def test_the_rebuild_gives_back_the_wal_space_it_took(tmp_path: Path) -> None:
    path = schema2_state(tmp_path)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.executemany("INSERT INTO anchors (tenant, thread, data) VALUES (?, ?, ?)",
                         [(C.tenant, C.thread, "x" * 1000)] * 3000)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:  # still in WAL mode
        assert migrate(conn) == len(MIGRATIONS)
        wal = path.with_name(path.name + "-wal")
        # The copy went through the WAL (some 3 MB); checkpointed and truncated since.
        assert wal.stat().st_size < 100_000


class FailingConnection:
    """A connection whose statement starting with `prefix` fails; or, for the copy, one
    interrupted part-way by SQLite itself (a progress handler that stops the statement)."""

    def __init__(self, conn: sqlite3.Connection, prefix: str) -> None:
        self._conn = conn
        self._prefix = prefix

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql.startswith(self._prefix):
            if not sql.startswith("INSERT INTO anchors_rebuilt"):
                raise sqlite3.OperationalError("disk I/O error (injected)")
            steps = iter(range(200))
            self._conn.set_progress_handler(lambda: next(steps, None) is None, 1)
            try:
                return self._conn.execute(sql, *args)
            finally:
                self._conn.set_progress_handler(None, 1)
        return self._conn.execute(sql, *args)

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction


@pytest.mark.parametrize("prefix", ["INSERT INTO anchors_rebuilt", "DROP TABLE anchors",
                                    "ALTER TABLE anchors_rebuilt", "CREATE INDEX anchors_by",
                                    "INSERT INTO schema_version"])
def test_a_failure_part_way_leaves_version_2_and_the_next_start_migrates(
        tmp_path: Path, prefix: str) -> None:
    path = schema2_state(tmp_path, filler=500)
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        before, sql_before = anchor_rows(conn), anchors_sql(conn)
        with pytest.raises(sqlite3.OperationalError):
            migrate(FailingConnection(conn, prefix))  # type: ignore[arg-type]
        assert not conn.in_transaction
        assert current_version(conn) == 2
        assert anchors_sql(conn) == sql_before and anchor_rows(conn) == before
        assert index_columns(conn) == ["tenant", "thread", "id"]
        assert "anchors_rebuilt" not in tables(conn)
        assert migrate(conn) == len(MIGRATIONS) and anchor_rows(conn) == before


# A child that starts the migration and dies in the middle of the copy: no rollback runs, so
# what survives is what SQLite's journal guarantees.
_KILLED_MID_COPY = """
import os, sqlite3, sys
from proxy.store.schema import migrate

class Dying:
    def __init__(self, conn):
        self.conn = conn
    def execute(self, sql, *args):
        if sql.startswith("INSERT INTO anchors_rebuilt"):
            steps = iter(range(300))
            self.conn.set_progress_handler(lambda: next(steps, None) is None and os._exit(9), 1)
        return self.conn.execute(sql, *args)

migrate(Dying(sqlite3.connect(sys.argv[1], isolation_level=None)))
"""


def test_a_kill_mid_copy_leaves_version_2_and_the_next_start_migrates(tmp_path: Path) -> None:
    path = schema2_state(tmp_path, filler=500)
    with closing(sqlite3.connect(path)) as conn:
        before, sql_before = anchor_rows(conn), anchors_sql(conn)
    root = str(Path(__file__).resolve().parents[1])
    child = subprocess.run([sys.executable, "-c", _KILLED_MID_COPY, str(path)],
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "PYTHONPATH": root})
    assert child.returncode == 9, child.stderr
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        assert current_version(conn) == 2
        assert anchors_sql(conn) == sql_before and anchor_rows(conn) == before
        assert "anchors_rebuilt" not in tables(conn)
        assert migrate(conn) == len(MIGRATIONS) and anchor_rows(conn) == before


async def test_check_state_passes_on_a_migrated_state(tmp_path: Path) -> None:
    schema2_state(tmp_path / "state")
    store = SqliteStore(tmp_path / "state")
    await store.open()
    try:
        store.add_anchor(C, anchor(20))
        assert (await store.load(C)).anchors == (anchor(20), anchor(10))
    finally:
        await store.close()
    config = str(write_config(tmp_path / "p.yaml", "http://h/v1", tmp_path / "state"))
    checked = cli("check-state", "--config", config)
    assert checked.returncode == 0 and checked.stdout.startswith("ok: "), checked
    with closing(sqlite3.connect(tmp_path / "state" / DB_FILE)) as conn:
        assert current_version(conn) == len(MIGRATIONS)


def test_ids_keep_growing_through_prunes(tmp_path: Path) -> None:
    """Without AUTOINCREMENT an id is reused only if the table's newest row goes: a prune
    never deletes it, so every new anchor's id is above all ids handed out before."""
    db = StateDb.connect(tmp_path, anchors_kept=2)
    try:
        highest = 0
        for n in range(60):
            key = (A, B, C)[n % 7 % 3]  # uneven: threads reach their prunes at different times
            db.write_batch([AnchorWrite(db, key, anchor(n))])
            (newest,) = db.conn.execute("SELECT max(id) FROM anchors").fetchone()
            assert newest > highest
            highest = newest
        assert db.conn.execute("SELECT count(*) FROM anchors").fetchone()[0] <= 3 * 2 * 2
    finally:
        db.close()
