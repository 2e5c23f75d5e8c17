"""The cached store in front of SQLite: activity writes are rate-limited, never left behind."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.records import ThreadKey
from proxy.store import SqliteStore
from proxy.store.cached import TOUCH_INTERVAL_S, CachedStore

KEY = ThreadKey("tenant-a", "thread-1")


@pytest.fixture
async def cached(tmp_path: Path) -> AsyncIterator[CachedStore]:
    store = CachedStore(SqliteStore(tmp_path))
    await store.open()
    yield store
    await store.close()


async def persisted(root: Path, key: ThreadKey = KEY) -> tuple[Any, Any]:
    store = SqliteStore(root)
    await store.open()
    try:
        state = await store.load(key)
    finally:
        await store.close()
    return state.last_activity, state.last_estimate


async def test_close_writes_each_threads_latest_activity_and_estimate(tmp_path: Path) -> None:
    store = CachedStore(SqliteStore(tmp_path))
    await store.open()
    other = ThreadKey("tenant-a", "thread-2")
    for at, estimate in ((1000.0, 237), (1005.0, 500), (1010.0, 812), (1012.0, None)):
        store.record_request(KEY, at, estimate)
    store.record_request(other, 1001.0, 9)
    store.record_request(other, 1002.0, 10)
    await store.close()
    assert await persisted(tmp_path) == (1012.0, 812)
    assert await persisted(tmp_path, other) == (1002.0, 10)


async def test_flush_writes_the_held_back_activity(cached: CachedStore) -> None:
    cached.record_request(KEY, 1000.0, 237)
    cached.record_request(KEY, 1010.0, 812)
    await cached.flush()
    state = await cached.store.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1010.0, 812)


async def test_the_next_request_after_the_interval_writes_the_held_estimate_too(
        cached: CachedStore) -> None:
    cached.record_request(KEY, 1000.0, 237)
    cached.record_request(KEY, 1010.0, 812)  # held back
    cached.record_request(KEY, 1000.0 + TOUCH_INTERVAL_S, None)  # no estimate of its own
    state = await cached.store.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1000.0 + TOUCH_INTERVAL_S, 812)


class CountingStore:
    """Records `record_request` calls; enough of a store for the activity path."""

    shared = False

    def __init__(self) -> None:
        self.touches: list[tuple[ThreadKey, float, int | None]] = []

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self.touches.append((key, at, estimate))

    async def flush(self) -> None:
        pass


async def test_activity_is_written_at_most_once_per_interval_per_thread() -> None:
    counting = CountingStore()
    store = CachedStore(counting)  # type: ignore[arg-type]
    for n in range(100):  # 100 requests in 29.7 s
        store.record_request(KEY, 1000.0 + n * 0.3, n)
    assert counting.touches == [(KEY, 1000.0, 0)]
    store.record_request(KEY, 1000.0 + TOUCH_INTERVAL_S, None)
    assert counting.touches[-1] == (KEY, 1000.0 + TOUCH_INTERVAL_S, 99)
    await store.flush()
    assert len(counting.touches) == 2  # nothing held back any more


async def test_held_back_touches_stay_bounded_and_are_written_not_dropped() -> None:
    counting = CountingStore()
    store = CachedStore(counting, max_threads=2)  # type: ignore[arg-type]
    keys = [ThreadKey("t", f"th{n}") for n in range(3)]
    for key in keys:
        store.record_request(key, 1000.0, 1)
        store.record_request(key, 1001.0, 2)  # held back
    assert counting.touches[-1] == (keys[0], 1001.0, 2)  # the third: the oldest written out
    await store.flush()
    assert sorted(t for t in counting.touches if t[1] == 1001.0) == [
        (key, 1001.0, 2) for key in keys]


def _reference_touches(requests: list[tuple[float, int | None]]) -> list[tuple[float, Any]]:
    """What `record_request` writes, as the rule says: a held-back touch merged with the
    next (the later time, the newest estimate given), written once the interval passed."""
    writes: list[tuple[float, Any]] = []
    held: tuple[float, Any] | None = None
    persisted: float | None = None
    for at, estimate in requests:
        if held is not None:
            at_, estimate_ = max(at, held[0]), estimate if estimate is not None else held[1]
        else:
            at_, estimate_ = at, estimate
        held = None
        if persisted is None or at - persisted >= TOUCH_INTERVAL_S:
            writes.append((at_, estimate_))
            persisted = at_
        else:
            held = (at_, estimate_)
    return writes + ([held] if held is not None else [])


@settings(max_examples=200)
@given(st.lists(st.tuples(st.sampled_from([1000.0, 1001.0, 1010.0, 1029.0, 1031.0, 1065.0]),
                          st.one_of(st.none(), st.integers(0, 9))), min_size=1, max_size=8))
async def test_touches_written_follow_the_merge_rule_whatever_the_order(
        requests: list[tuple[float, int | None]]) -> None:
    counting = CountingStore()
    store = CachedStore(counting)  # type: ignore[arg-type]
    for at, estimate in requests:
        store.record_request(KEY, at, estimate)
    await store.flush()
    assert [(at, estimate) for _, at, estimate in counting.touches] == (
        _reference_touches(requests))
