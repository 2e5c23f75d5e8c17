"""A state the cache reads from the store carries the touches it has not written yet."""

from __future__ import annotations

from pathlib import Path

from proxy.records import ThreadKey
from proxy.store import SqliteStore
from proxy.store.cached import CachedStore

KEY = ThreadKey("tenant", "thread-a")


async def test_a_thread_pushed_out_of_the_cache_keeps_its_held_back_touch(tmp_path: Path) -> None:
    store = CachedStore(SqliteStore(tmp_path), max_threads=2, write_held_every_s=3600.0)
    await store.open()
    try:
        await store.load(KEY)
        store.record_request(KEY, 1000.0, 10)  # the first: written at once
        store.record_request(KEY, 1005.0, 20)  # within the interval: held back
        for n in range(2):  # two other threads push KEY's state out of the cache
            await store.load(ThreadKey("tenant", f"other-{n}"))
        assert store.cached(KEY) is None
        state = await store.load(KEY)
        # Read back from the store alone, it was 1000.0 and 10: a request's idle time and
        # last estimate went back to before the held touch.
        assert (state.last_activity, state.last_estimate) == (1005.0, 20)
    finally:
        await store.close()
