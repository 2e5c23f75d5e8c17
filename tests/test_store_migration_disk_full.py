"""A migration that fills the disk: SQLite rolls its transaction back by itself, the database
stays at the version before, and the error the operator sees is the full disk."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.store.schema import MIGRATIONS, current_version, migrate


def copy_a_big_table(conn: sqlite3.Connection) -> None:
    # As `_plain_anchor_ids` does: a whole table rewritten inside the migration's transaction.
    conn.execute("CREATE TABLE big (x TEXT)")
    conn.executemany("INSERT INTO big VALUES (?)", [("x" * 1000,)] * 500)


def test_a_migration_that_fills_the_disk_raises_the_full_disk_and_changes_nothing(
        tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        migrate(conn, MIGRATIONS[:1])
        conn.execute("PRAGMA max_page_count=40")  # the disk, as far as SQLite can tell
        with pytest.raises(sqlite3.OperationalError) as raised:
            migrate(conn, (*MIGRATIONS[:1], copy_a_big_table))
        assert raised.value.sqlite_errorname == "SQLITE_FULL", raised.value
        assert not conn.in_transaction
        assert current_version(conn) == 1
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = 'big'"
                            ).fetchone() == (0,)
