"""Writes that fail: a failed COMMIT keeps its own error, lost queued writes reach the log, and
a request whose microcompaction mark cannot be written still gets its answer."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.records import ThreadKey
from proxy.server.services import SERVICES
from proxy.store import SqliteStore
from proxy.store.sqlite_db import StateDb
from proxy.testing.sessions import coding_session
from tests.conftest import API_KEY
from tests.test_store_sqlite import anchor

KEY = ThreadKey("tenant-a", "thread-1")


class FullDiskOnCommit:
    """A connection whose COMMIT fails as on a full disk, after SQLite rolled back itself."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT":
            self.conn.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return self.conn.execute(sql, *args)

    def cursor(self) -> FullDiskOnCommit:
        return self  # the store's write cursor commits through `execute` above

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def test_a_failed_commit_raises_its_own_error_not_the_rollbacks(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path)
    try:
        db.write(db.add_anchor, KEY, anchor(1))
        assert db._known.get(KEY) is not None
        real = db.conn
        db.conn = FullDiskOnCommit(real)  # type: ignore[assignment]
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            db.write(db.touch, ThreadKey("t", "other"), 1.0, 5)
        assert db._known.get(KEY) is None  # forgotten: a rollback may have removed its row
        db.conn = real
        db.write(db.touch, ThreadKey("t", "other"), 2.0, 6)  # the connection still works
        assert db.load(ThreadKey("t", "other")).last_estimate == 6
    finally:
        db.close()


class Lines:
    def __init__(self) -> None:
        self.lines: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.lines.append((event, fields))


async def test_lost_queued_writes_are_logged_rate_limited_without_their_data(
        tmp_path: Path) -> None:
    log = Lines()
    store = SqliteStore(tmp_path, log=log)
    await store.open()
    store.record_request(KEY, 1.0, 1)
    await store.flush()

    def fill_the_disk() -> None:  # the database may not grow by a page: SQLITE_FULL
        conn = store._require_db().conn
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    await store._run(fill_the_disk)
    for n in range(50):  # a few may fit in the last page's free space
        store.record_request(_secret_key(n), float(n), n)
    await store.flush()
    lost = store.writer.failed
    assert lost > 0
    [(event, fields)] = log.lines
    assert event == "state_write_failed" and fields["failed"] == lost
    assert fields["error"] == "OperationalError" and fields["sqlite_error"] == "SQLITE_FULL"
    for n in range(50, 60):  # within the interval: counted, not logged yet
        store.record_request(_secret_key(n), float(n), n)
    await store.flush()
    assert len(log.lines) == 1 and store.writer.failed == lost + 10
    await store.close()  # the rest is told at close
    assert [f["failed"] for _, f in log.lines] == [lost, 10]
    assert log.lines[-1][1]["failed_total"] == lost + 10
    assert "SECRET" not in repr(log.lines)


def test_write_failures_are_reported_at_most_once_per_interval() -> None:
    from proxy.store.failures import WriteFailures

    failures = WriteFailures(interval_s=10)
    full = sqlite3.OperationalError("database or disk is full")
    assert failures.record(3, full, now=100.0) == {"failed": 3, "error": "OperationalError"}
    assert failures.record(2, full, now=105.0) is None
    assert failures.record(1, ValueError("x"), now=109.0) is None
    assert failures.record(4, full, now=110.0) == {"failed": 7, "error": "OperationalError"}
    assert failures.take() is None
    assert failures.record(1, ValueError("secret text"), now=111.0) is None
    assert failures.take() == {"failed": 1, "error": "ValueError"}


def _secret_key(n: int) -> ThreadKey:
    return ThreadKey("t", f"SECRET-{n:03d}-" + "x" * 200)  # sorted: each row goes last



# ------------------------------------------------------------------ through the proxy


def test_a_microcompact_mark_the_full_disk_refuses_does_not_fail_the_request(
        make_fake, make_proxy, loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, compaction={"microcompact": {"idle_seconds": 0, "keep_recent": 1}})
    store = proxy.app[SERVICES].pipeline.store
    messages = coding_session(60, seed=3)
    assert _post(proxy, messages[:40]).status_code == 200

    loop_thread.run(store.flush())  # the first request's thread row is on disk
    db = store.store._require_db()
    db.conn = FullDiskOnCommit(db.conn)  # type: ignore[assignment]
    answer = _post(proxy, messages[:41])  # idle: old results are cleared, the mark is new
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "applied"
    [failed] = proxy.logs.events("microcompact_not_recorded")
    assert failed["thread"] == "idle" and failed["error"] == "OperationalError"
    assert not proxy.logs.events("unhandled_error")
    [on_disk] = loop_thread.run(store.find("idle"))
    cached = loop_thread.run(store.load(on_disk.key))
    assert on_disk.microcompact is None and cached.microcompact is None, \
        "the cache claims a mark that never reached the disk"


def _post(proxy: Any, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                      content=orjson.dumps({"model": "gpt-4o", "messages": messages}),
                      headers={"x-thread-id": "idle", "authorization": f"Bearer {API_KEY}"})
