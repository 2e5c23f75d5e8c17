"""An answer id holding a lone surrogate (a client's JSON can send one) is stored and found."""

from __future__ import annotations

import time
from pathlib import Path

from proxy.store import FailureHooks, SqliteStore


async def test_an_id_with_a_lone_surrogate_is_stored_and_found(tmp_path: Path) -> None:
    lost: list[int] = []
    store = SqliteStore(tmp_path, hooks=FailureHooks(writes_lost=lost.append))
    await store.open()
    try:
        await store.add_origin("resp_\udfff", "backup", time.time())
        await store.add_origin("resp_\ud800", "primary", time.time())
        # SQLite text cannot hold one: the write was lost and the read raised
        # UnicodeEncodeError (the server logged `origin_not_read` for each such request).
        assert await store.origin("resp_\udfff") == "backup"
        assert await store.origin("resp_\ud800") == "primary"
        assert await store.origin("resp_\udc80") is None
        assert lost == []
    finally:
        await store.close()
