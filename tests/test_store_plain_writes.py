"""The request path's store calls that never wait: queued writes and a cached thread's state
are plain calls, not coroutines, and still read back what they wrote."""

from __future__ import annotations

from pathlib import Path

from proxy.records import Anchor, ThreadKey
from proxy.server.pipeline import Pipeline
from proxy.settings import parse_settings
from proxy.store import SqliteStore
from proxy.store.cached import CachedStore

KEY = ThreadKey("tenant-a", "thread-1")
ANCHOR = Anchor(response_digests=("r1",), position=3, prefix_digest="p1", input_tokens=1200,
                output_tokens=10, model="gpt-4o", created_at=100.0)


async def test_queued_writes_return_at_once_and_a_later_load_sees_them(tmp_path: Path) -> None:
    store = CachedStore(SqliteStore(tmp_path))
    await store.open()
    try:
        assert store.cached(KEY) is None  # never loaded: only `load` reads the store
        assert store.record_request(KEY, 1000.0, 812) is None
        assert store.add_anchor(KEY, ANCHOR) is None
        state = await store.load(KEY)
        assert (state.last_activity, state.last_estimate, state.anchors) == (1000.0, 812, (ANCHOR,))
        assert store.cached(KEY) is state
        store.record_request(KEY, 1001.0, 900)  # held back on disk, at once in the cache
        cached = store.cached(KEY)
        assert cached is not None and (cached.last_activity, cached.last_estimate) == (1001.0, 900)
    finally:
        await store.close()
    reopened = SqliteStore(tmp_path)
    await reopened.open()
    try:
        state = await reopened.load(KEY)
        assert (state.last_activity, state.last_estimate, state.anchors) == (1001.0, 900, (ANCHOR,))
    finally:
        await reopened.close()


def test_the_pipeline_reads_any_store_through_the_cache(tmp_path: Path) -> None:
    settings = parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
                               "state": {"path": str(tmp_path)}}, {})
    plain = SqliteStore(tmp_path)
    wrapped = Pipeline(settings, store=plain).store
    assert isinstance(wrapped, CachedStore) and wrapped.store is plain
    cached = CachedStore(plain)
    assert Pipeline(settings, store=cached).store is cached
