"""Any sequence of store operations gives the same reads on Redis as on SQLite (the oracle).

Except a thread's estimate: Redis keeps that of the newest touch by its time (instances' touches
reach it out of order), SQLite the last written (one process writes them in time order); so
the estimates are compared with a model of the Redis rule instead (`Estimates`).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.records import ThreadKey, ThreadState
from proxy.store import SqliteStore, StateStore
from proxy.store.base import ThreadSummary
from proxy.store.redis_store import RedisStore
from tests.store_backends import anchor, event, mark

KEYS = [ThreadKey("tenant-a", "t1"), ThreadKey("tenant-b", "t1"), ThreadKey("tenant-a", "t2"),
        ThreadKey("\ud800", "a\x00b"), ThreadKey("tenant-a", "x" * 300)]
NOW = time.time()

keys = st.sampled_from(KEYS)
times = st.floats(1.0, 1e6, allow_nan=False) | st.sampled_from([5.0, 10.0, 10.0 + 1e-9])
estimates = st.none() | st.integers(0, 10**9)
texts = st.text(st.characters(codec=None, categories=None), max_size=20)
operations = st.lists(st.one_of(
    st.tuples(st.just("touch"), keys, times, estimates),
    st.tuples(st.just("touches"), st.lists(st.tuples(keys, times, estimates), max_size=4)),
    st.tuples(st.just("anchor"), keys, st.integers(0, 40), times),
    st.tuples(st.just("event"), keys, st.integers(0, 9), texts, times),
    st.tuples(st.just("mark"), keys, st.integers(0, 9)),
    st.tuples(st.just("origin"), st.sampled_from(["r1", "r2", "\udfff"]),
              st.sampled_from(["up", "down"]), st.floats(0, 100)),
    st.tuples(st.just("load"), keys),
), max_size=30)


class Estimates:
    """Each thread's estimate by the rule: the newest touch that gave one, by its time (of two
    at one time, the later written)."""

    def __init__(self) -> None:
        self._dated: dict[ThreadKey, tuple[float, int]] = {}

    def touched(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        known = self._dated.get(key)
        if estimate is not None and (known is None or at >= known[0]):
            self._dated[key] = (at, estimate)

    def of(self, key: ThreadKey) -> int | None:
        known = self._dated.get(key)
        return None if known is None else known[1]


def undated(read: Any) -> Any:
    """A read without its estimates (compared with `Estimates` instead)."""
    if isinstance(read, list):
        return [undated(item) for item in read]
    if isinstance(read, tuple):
        return tuple(undated(item) for item in read)
    if isinstance(read, ThreadState):
        return replace(read, last_estimate=None, estimate_at=None)
    if isinstance(read, ThreadSummary):
        return replace(read, last_estimate=None)
    return read


async def apply(store: StateStore, operation: tuple[Any, ...]) -> Any:
    """What the operation returns that a caller sees."""
    kind, *args = operation
    if kind == "touch":
        store.record_request(*args)
    elif kind == "touches":
        await store.record_requests(args[0])
    elif kind == "anchor":
        key, n, at = args
        store.add_anchor(key, anchor(n, at=at))
    elif kind == "event":
        key, n, text, at = args
        return await store.add_event(key, replace(event(n, text), created_at=at))
    elif kind == "mark":
        key, n = args
        await store.set_microcompact(key, mark(n))
    elif kind == "origin":
        made_id, upstream, after = args
        await store.add_origin(made_id, upstream, NOW + after)
    else:
        return await store.load(args[0])
    return None


def touched(operation: tuple[Any, ...]) -> list[tuple[ThreadKey, float, int | None]]:
    if operation[0] == "touch":
        return [operation[1:]]
    return list(operation[1]) if operation[0] == "touches" else []


async def reads(store: StateStore) -> Any:
    threads = await store.list_threads(limit=1000)
    return ([await store.load(key) for key in KEYS], [await store.events(key) for key in KEYS],
            [await store.find(key.thread) for key in KEYS],
            [await store.origin(made_id) for made_id in ("r1", "r2", "\udfff")],
            # Ties in activity have no order to keep; everything else is compared.
            sorted(threads, key=lambda line: (-line.last_activity, line.tenant, line.thread)),
            [line.last_activity for line in threads])


async def run_both(steps: list[tuple[Any, ...]], redis_url: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        sqlite = SqliteStore(root)
        redis_store = RedisStore(redis_url, prefix=f"cp-diff:{uuid.uuid4().hex}:")
        await sqlite.open()
        await redis_store.open()
        estimates = Estimates()
        try:
            for step in steps:
                on_redis = await apply(redis_store, step)
                assert undated(on_redis) == undated(await apply(sqlite, step)), step
                if step[0] == "anchor":
                    # SQLite applies a batch's anchors after its other writes: an anchor that
                    # creates a thread, batched with a later touch, would leave the touch's
                    # time as its creation (Redis keeps the anchor's, the first).
                    await sqlite.flush()
                for key, at, estimate in touched(step):
                    estimates.touched(key, at, estimate)
                if step[0] == "load":
                    assert on_redis.last_estimate == estimates.of(step[1]), step
            on_redis = await reads(redis_store)
            assert undated(on_redis) == undated(await reads(sqlite))
            assert [state.last_estimate for state in on_redis[0]] == [
                estimates.of(key) for key in KEYS]
        finally:
            await sqlite.close()
            await redis_store.close()


def test_redis_reads_what_sqlite_reads_after_any_operations(redis_url: str) -> None:
    @given(operations)
    def check(steps: list[tuple[Any, ...]]) -> None:
        asyncio.run(run_both(steps, redis_url))

    check()
