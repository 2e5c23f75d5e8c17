"""Schema versions: from an empty file, idempotent re-open, the next migration, newer files."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.records import ThreadKey
from proxy.store import SqliteStore, StoreError
from proxy.store.schema import MIGRATIONS, current_version, migrate

KEY = ThreadKey("t", "th")


def versions(path: Path) -> list[int]:
    with closing(sqlite3.connect(path)) as conn:
        return [v for (v,) in conn.execute("SELECT version FROM schema_version ORDER BY 1")]


async def test_an_empty_file_is_migrated_to_the_latest_version(tmp_path: Path) -> None:
    (tmp_path / "state.db").write_bytes(b"")
    store = SqliteStore(tmp_path)
    await store.open()
    store.record_request(KEY, 1.0, 3)
    await store.close()
    assert versions(tmp_path / "state.db") == list(range(1, len(MIGRATIONS) + 1))


async def test_reopening_is_idempotent_and_keeps_the_data(tmp_path: Path) -> None:
    for estimate in (1, 2, 3):
        store = SqliteStore(tmp_path)
        await store.open()
        assert (await store.load(KEY)).last_estimate == (estimate - 1 or None)
        store.record_request(KEY, float(estimate), estimate)
        await store.close()
    assert versions(tmp_path / "state.db") == list(range(1, len(MIGRATIONS) + 1))


def test_the_next_migration_is_one_more_function(tmp_path: Path) -> None:
    calls: list[int] = []

    def add_notes(conn: sqlite3.Connection) -> None:
        calls.append(1)
        conn.execute("ALTER TABLE threads ADD COLUMN notes TEXT")

    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    latest = len(MIGRATIONS)
    assert migrate(conn) == latest
    assert migrate(conn, (*MIGRATIONS, add_notes)) == latest + 1
    assert migrate(conn, (*MIGRATIONS, add_notes)) == latest + 1 and calls == [1]
    conn.execute("INSERT INTO threads (tenant, thread, created_at, last_activity, notes) "
                 "VALUES ('t', 'th', 0, 0, 'x')")
    conn.close()


def test_a_failing_migration_leaves_the_previous_version(tmp_path: Path) -> None:
    def half_done(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE partial (x)")
        raise RuntimeError("disk on fire")

    conn = sqlite3.connect(tmp_path / "state.db", isolation_level=None)
    with pytest.raises(RuntimeError):
        migrate(conn, (*MIGRATIONS, half_done))
    assert current_version(conn) == len(MIGRATIONS)
    assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'partial'"
                        ).fetchone() == (0,)
    conn.close()


async def test_a_database_from_a_newer_proxy_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    await store.open()
    await store.close()
    with closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as conn:
        conn.execute("INSERT INTO schema_version VALUES (99, 0)")
    with pytest.raises(StoreError, match="newer"):
        await store.open()
    with pytest.raises(StoreError):
        await store.load(KEY)
