"""A state written at schema version 1 (the proxy before the `origins` table), upgraded in place.

An upgrade installs the new package while the old proxy still serves: the new package's state
commands must read that state as it is, without migrating it under the old proxy. The new proxy
then migrates it once and carries every thread on (checkpoint, anchors, microcompact mark).
"""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from dataclasses import replace
from pathlib import Path

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.store import SqliteStore, open_read_only
from proxy.store.jsoncodec import dumps_text
from proxy.store.schema import MIGRATIONS, migrate
from proxy.store.db_file import DB_FILE
from proxy.store.sqlite_db import StateDb
from tests.process import cli, write_config

KEY = ThreadKey("tenant", "thread-1")
ANCHOR = Anchor(("r1",), 4, "p1", 900, 40, created_at=1000.0)
EVENT = CompactionEvent(cutoff_index=4, cutoff_message_id="m4", prefix_digest="d4",
                        summary_message={"role": "user", "content": "summary"}, created_at=999.0)
MARK = MicrocompactMark("m2", 2, created_at=1001.0)


def schema1_state(root: Path) -> Path:
    """A state as the proxy at schema version 1 left it: migration 1 only, one thread written
    through the statements the store uses (they touch no table added since), but the anchor's."""
    root.mkdir(mode=0o700, exist_ok=True)
    path = root / DB_FILE
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("PRAGMA journal_mode=WAL")
        assert migrate(conn, MIGRATIONS[:1]) == 1
        db = StateDb(conn)
        db.write(db.touch, KEY, 1000.0, 950)
        # As the version 1 proxy stored an anchor (the store's statements now keep the
        # thread's newest anchor time too, in a column version 1 does not have).
        conn.execute("INSERT INTO anchors (tenant, thread, data) VALUES (?, ?, ?)",
                     (KEY.tenant, KEY.thread, dumps_text(ANCHOR.to_data())))
        db.write(db.add_event, KEY, EVENT)
        db.write(db.set_microcompact, KEY, MARK)
    return path


def version(path: Path) -> int:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]


def test_the_read_only_view_reads_it_without_migrating_it(tmp_path: Path) -> None:
    path = schema1_state(tmp_path)
    with closing(open_read_only(tmp_path)) as db:
        state = db.load(KEY)
        assert [s.thread for s in db.list_threads(10)] == [KEY.thread]
        assert db.integrity_check() == "ok"
    assert state.event == replace(EVENT, seq=1) and state.anchors == (ANCHOR,) and state.microcompact == MARK
    assert version(path) == 1


def test_the_state_commands_of_the_new_package_work_beside_the_old_proxy(tmp_path: Path) -> None:
    path = schema1_state(tmp_path / "state")
    config = str(write_config(tmp_path / "p.yaml", "http://h/v1", tmp_path / "state"))
    listed = cli("threads", "--config", config)
    assert listed.returncode == 0 and KEY.thread in listed.stdout, listed
    shown = cli("inspect", KEY.thread, "--config", config)
    assert shown.returncode == 0, shown
    assert json.loads(shown.stdout)[0]["checkpoint"]["cutoff_message_id"] == "m4"
    checked = cli("check-state", "--config", config)
    assert checked.returncode == 0 and checked.stdout.startswith("ok: "), checked
    assert version(path) == 1


async def test_the_new_proxy_migrates_it_once_and_keeps_every_thread(tmp_path: Path) -> None:
    path = schema1_state(tmp_path)
    for _ in range(2):
        store = SqliteStore(tmp_path)
        await store.open()
        try:
            state = await store.load(KEY)
            await store.add_origin("resp_1", "openai", 2000.0)
            assert await store.origin("resp_1") == "openai"
        finally:
            await store.close()
        assert state.event is not None and state.event.cutoff_message_id == "m4"
        assert state.event_count == 1 and state.anchors[-1] == ANCHOR
        assert state.microcompact == MARK and state.last_estimate == 950
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("SELECT version FROM schema_version ORDER BY 1").fetchall() == [
            (v,) for v in range(1, len(MIGRATIONS) + 1)]
