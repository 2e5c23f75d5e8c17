"""A first start killed before its schema committed leaves a state.db without tables (empty, or
in WAL mode, or with an empty `schema_version`): the next start creates the schema in it, and
meanwhile the state commands read it as the empty state it is, not as another program's file.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.cli_state import check_state, list_threads, retention_note
from proxy.records import ThreadKey
from proxy.settings import Settings, StateSettings
from proxy.store import SqliteStore, StoreError, open_read_only
from proxy.store.schema import MIGRATIONS, current_version
from tests.process import kill_script

CHILD = """
import asyncio, sys
from proxy.store import SqliteStore

async def main(root):
    store = SqliteStore(root)
    print("opening", flush=True)
    await store.open()
    await asyncio.sleep(30)

asyncio.run(main(sys.argv[1]))
"""
KILLS = 8
OPEN_S = 0.01  # a first open takes some 6 ms here: the kill lands inside it or just after


def empty_file(db: Path) -> None:
    db.touch()


def wal_without_tables(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")


def schema_version_without_rows(db: Path) -> None:
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE schema_version "
                     "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")


def settings_for(root: Path) -> Settings:
    return Settings(state=StateSettings(path=str(root)))


def assert_commands_read_an_empty_state(root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    checked = check_state(settings_for(root))
    out, err = capsys.readouterr()
    assert checked == 0 and out.startswith("ok: ") and not err, (out, err)
    listed = list_threads(settings_for(root), 10)
    out, err = capsys.readouterr()
    assert (listed, out, err) == (0, f"no threads in {root}\n", retention_note(30) + "\n")


async def reopened_at_the_latest_version(root: Path) -> None:
    store = SqliteStore(root)
    await store.open()
    try:
        store.record_request(ThreadKey("t", "x"), 1000.0, 5)
        assert (await store.load(ThreadKey("t", "x"))).last_estimate == 5
    finally:
        await store.close()
    with closing(open_read_only(root)) as db:
        assert current_version(db.conn) == len(MIGRATIONS)


@pytest.mark.parametrize("left", [empty_file, wal_without_tables, schema_version_without_rows])
def test_a_state_without_tables_reads_as_empty_and_the_next_start_creates_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], left: object) -> None:
    left(tmp_path / "state.db")  # type: ignore[operator]
    before = (tmp_path / "state.db").read_bytes()
    assert_commands_read_an_empty_state(tmp_path, capsys)
    with closing(open_read_only(tmp_path)) as db:
        assert db.find("x") == [] and db.list_threads(10) == []
    assert (tmp_path / "state.db").read_bytes() == before
    asyncio.run(reopened_at_the_latest_version(tmp_path))


def test_a_state_with_a_table_of_another_program_is_still_refused(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER)")
    with pytest.raises(Exception, match="not a compaction-proxy state database"):
        open_read_only(tmp_path)


def test_sigkill_during_the_first_start_leaves_a_state_the_commands_and_serve_accept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seed = random.randrange(2**32)
    rng = random.Random(seed)
    for n in range(KILLS):
        root = tmp_path / f"state{n}"
        kill_script(CHILD, [str(root)], b"opening\n", rng.uniform(0.0, OPEN_S), alive=False)
        if not (root / "state.db").exists():
            continue  # killed before it made the file: `check-state` says there is none
        try:  # whatever instant it died at, no thread was written yet
            assert_commands_read_an_empty_state(root, capsys)
        except AssertionError as error:
            raise AssertionError(f"seed {seed}, kill {n}: {error}") from None
        asyncio.run(reopened_at_the_latest_version(root))


def hot_journal(root: Path, before: int) -> None:
    """`root/state.db` as a kill leaves it mid-transaction in rollback-journal mode, `before`
    rows committed first (the state of a write SQLite must roll back: a copy of the files
    taken while the transaction has spilled pages into the database file)."""
    live = root.parent / f"{root.name}-live"
    live.mkdir()
    (live / "state.db").touch()
    with closing(sqlite3.connect(live / "state.db", isolation_level=None)) as conn:
        if before:
            conn.execute("CREATE TABLE other (x)")
            conn.executemany("INSERT INTO other VALUES (?)", [("x" * 1000,)] * before)
        conn.execute("PRAGMA cache_size=1")  # the transaction's pages spill into the file
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("CREATE TABLE t (x)")
        conn.executemany("INSERT INTO t VALUES (?)", [("x" * 1000,)] * 200)
        root.mkdir()
        for name in ("state.db", "state.db-journal"):
            (root / name).write_bytes((live / name).read_bytes())
        conn.execute("ROLLBACK")


def test_a_hot_journal_of_the_first_write_reads_as_empty_and_the_next_start_rolls_it_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "state"
    hot_journal(root, before=0)
    assert_commands_read_an_empty_state(root, capsys)
    assert (root / "state.db-journal").exists()  # left for the writer to roll back
    asyncio.run(reopened_at_the_latest_version(root))


def test_a_hot_journal_over_data_says_to_let_a_writer_roll_it_back(tmp_path: Path) -> None:
    root = tmp_path / "state"
    hot_journal(root, before=50)
    with pytest.raises(StoreError, match="state.db-journal is hot.*start the proxy once"):
        open_read_only(root)
