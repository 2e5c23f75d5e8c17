"""The store's memory of which upstream made a stored answer: migration 2, reads, ageing out."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store import SqliteStore
from proxy.store.schema import MIGRATIONS, current_version, migrate
from proxy.store.sqlite_db import ORIGINS_KEPT_S

KEY = ThreadKey("t", "th")


async def test_a_version_one_state_gains_origins_and_keeps_its_threads(tmp_path: Path) -> None:
    with closing(sqlite3.connect(tmp_path / "state.db", isolation_level=None)) as conn:
        assert migrate(conn, MIGRATIONS[:1]) == 1
        conn.execute("INSERT INTO threads (tenant, thread, created_at, last_activity, "
                     "last_estimate) VALUES ('t', 'th', 1, 2, 42)")
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        assert (await store.load(KEY)).last_estimate == 42
        await store.add_origin("resp_1", "other", 10.0)
        assert await store.origin("resp_1") == "other"
        assert await store.origin("resp_unknown") is None
    finally:
        await store.close()
    with closing(sqlite3.connect(tmp_path / "state.db")) as conn:
        assert current_version(conn) == len(MIGRATIONS)  # the latest, origins and all


async def test_origins_survive_a_reopen_and_age_out(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path)
    await store.open()
    await store.add_origin("chatcmpl-old", "a", 0.0)
    await store.add_origin("resp_kept", "b", ORIGINS_KEPT_S - 1)
    await store.add_origin("resp_kept", "a", ORIGINS_KEPT_S)  # made again: the latest wins
    await store.add_origin("resp_new", "b", ORIGINS_KEPT_S + 1)  # the old one ages out
    await store.close()
    store = SqliteStore(tmp_path)
    await store.open()
    try:
        assert await store.origin("chatcmpl-old") is None
        assert await store.origin("resp_kept") == "a"
        assert await store.origin("resp_new") == "b"
    finally:
        await store.close()
