"""A state database with tables but no schema version (only tampering makes one).

The serving store and the read-only CLI both refuse it with what is wrong and what to do,
and neither changes the file (no half-run migration 1)."""

from __future__ import annotations

import hashlib
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.records import ThreadKey
from proxy.store import SqliteStore, StoreError, open_read_only
from tests.process import cli, write_config


async def unversioned(root: Path) -> bytes:
    """A real state with one thread, its schema_version rows then deleted; the file's digest."""
    store = SqliteStore(root)
    await store.open()
    store.record_request(ThreadKey("tenant", "t1"), 1000.0, 10)
    await store.close()
    with closing(sqlite3.connect(root / "state.db", isolation_level=None)) as conn:
        conn.execute("DELETE FROM schema_version")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return hashlib.sha256((root / "state.db").read_bytes()).digest()


async def test_the_serving_store_refuses_it_naming_the_problem_and_the_remedy(
        tmp_path: Path) -> None:
    before = await unversioned(tmp_path)
    with pytest.raises(StoreError) as refused:
        await SqliteStore(tmp_path).open()
    message = str(refused.value)
    assert str(tmp_path / "state.db") in message
    assert "no schema version" in message and "anchors, events, history_removals, origins, threads" in message
    assert "restore it from a backup" in message and "move it away" in message
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        assert conn.execute("SELECT count(*) FROM threads").fetchone() == (1,)
    assert hashlib.sha256((tmp_path / "state.db").read_bytes()).digest() == before


async def test_the_read_only_view_says_the_same_not_start_the_proxy_to_migrate(
        tmp_path: Path) -> None:
    await unversioned(tmp_path)
    with pytest.raises(StoreError) as refused:
        open_read_only(tmp_path)
    assert "no schema version" in str(refused.value)
    assert "migrate" not in str(refused.value)


async def test_the_cli_reports_it_in_one_line(tmp_path: Path) -> None:
    before = await unversioned(tmp_path / "state")
    config = str(write_config(tmp_path / "p.yaml", "http://h/v1", tmp_path / "state"))
    for command in (["threads"], ["inspect", "t1"]):
        result = cli(*command, "--config", config)
        assert result.returncode == 1 and result.stderr.count("\n") == 1, result
        assert "no schema version" in result.stderr
    assert hashlib.sha256((tmp_path / "state" / "state.db").read_bytes()).digest() == before
