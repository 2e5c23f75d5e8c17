"""Retention on Redis (`state.retention_days`): a thread's keys carry its TTL, renewed by each of
its writes, on a real Redis server. A short retention (milliseconds) stands in for days: the
server counts the TTL, not the proxy's clock."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from proxy.records import ThreadKey
from proxy.settings import RedisSettings, StateSettings
from proxy.store import create_history, create_store
from proxy.store.redis_history import RedisHistory
from proxy.store.redis_keys import thread_digest
from proxy.store.redis_store import RedisStore
from tests.store_backends import LogLines, anchor, event, mark

DAY = 86_400.0
KEY = ThreadKey("tenant-a", "thread-1")
OTHER_TENANT = ThreadKey("tenant-b", "thread-1")


def names(prefix: str, key: ThreadKey = KEY) -> dict[str, str]:
    """The thread's own keys (the id's tenant set too), by what they hold."""
    digest = thread_digest(key)
    return {"thread": f"{prefix}t:{digest}", "anchors": f"{prefix}a:{digest}",
            "events": f"{prefix}e:{digest}", "history": f"{prefix}h:{digest}",
            "tenants": RedisStore("redis://x", prefix=prefix).keys.tenants_of(key.thread)}


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    connection = redis.asyncio.Redis.from_url(redis_url)
    yield connection
    await connection.aclose()


async def opened(redis_url: str, prefix: str, retention_s: float) -> tuple[RedisStore, RedisHistory]:
    store = RedisStore(redis_url, prefix=prefix, retention_s=retention_s)
    history = RedisHistory(RedisSettings(url=redis_url, prefix=prefix), retention_s=retention_s)
    await store.open()
    await history.open()
    return store, history


async def whole_thread(store: RedisStore, history: RedisHistory, key: ThreadKey = KEY) -> None:
    store.record_request(key, 1000.0, 100)
    store.add_anchor(key, anchor(1))
    await history.offload_async(key, [{"id": "m1", "message": {"role": "user", "content": "x"}}])
    await store.add_event(key, event(1))
    await store.set_microcompact(key, mark(1))
    await store.flush()


async def ttls(client: redis.asyncio.Redis, prefix: str, key: ThreadKey = KEY) -> dict[str, int]:
    return {what: await client.pttl(name) for what, name in names(prefix, key).items()}


async def closed(*stores: Any) -> None:
    for store in stores:
        await store.close()


async def test_every_key_of_a_thread_gets_the_retention_as_ttl(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    store, history = await opened(redis_url, redis_prefix, 30 * DAY)
    try:
        await whole_thread(store, history)
        for what, left in (await ttls(client, redis_prefix)).items():
            assert 29.9 * DAY * 1000 < left <= 30 * DAY * 1000, what
        async with store.compaction_lease(KEY):  # the lease keeps its own, short, expiry
            lease = await client.pttl(f"{redis_prefix}l:{thread_digest(KEY)}")
            assert 0 < lease <= 30_000
        assert await client.pttl(f"{redis_prefix}threads") == -1  # shared by every thread
    finally:
        await closed(store, history)


@pytest.mark.parametrize("write", ["touch", "anchor", "checkpoint", "microcompact", "touches"])
async def test_any_write_of_the_thread_renews_every_key_it_has(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis, write: str) -> None:
    """A thread in use never loses an older key: a checkpoint written weeks ago lives as long
    as the thread's last request."""
    store, history = await opened(redis_url, redis_prefix, 30 * DAY)
    try:
        await whole_thread(store, history)
        for name in names(redis_prefix).values():
            await client.pexpire(name, 60_000)  # as if written a while ago
        if write == "touch":
            store.record_request(KEY, 2000.0, None)
        elif write == "anchor":
            store.add_anchor(KEY, anchor(2))
        elif write == "checkpoint":
            await store.add_event(KEY, event(2))
        elif write == "microcompact":
            await store.set_microcompact(KEY, mark(2))
        else:  # the cache's periodic write of held-back touches: one script for many threads
            await store.record_requests([(OTHER_TENANT, 2000.0, 5), (KEY, 2000.0, None)])
        await store.flush()
        for what, left in (await ttls(client, redis_prefix)).items():
            assert left > 29 * DAY * 1000, what
    finally:
        await closed(store, history)


async def test_a_thread_with_no_write_expires_whole_and_comes_back_fresh(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    store, history = await opened(redis_url, redis_prefix, 0.4)  # 400 ms
    try:
        await whole_thread(store, history)
        assert (await store.load(KEY)).event is not None
        await asyncio.sleep(0.6)
        assert [name for name in names(redis_prefix).values() if await client.exists(name)] == []
        assert not (await store.load(KEY)).known
        assert await store.list_threads() == [] and await store.find(KEY.thread) == []
        # It comes back: a new thread, its first checkpoint seq 1 and its history from line 1.
        appended = await history.offload_async(KEY, [{"id": "n1", "message": {}}])
        assert (appended.start, appended.end) == (0, 1)
        assert (await store.add_event(KEY, event(5))).seq == 1
        store.record_request(KEY, 3000.0, 7)
        await store.flush()
        back = await store.load(KEY)
        assert back.known and back.event_count == 1 and back.microcompact is None
        assert [s.thread for s in await store.list_threads()] == [KEY.thread]
    finally:
        await closed(store, history)


async def test_lines_offloaded_without_their_checkpoint_expire_too(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    store, history = await opened(redis_url, redis_prefix, 30 * DAY)
    try:
        await history.offload_async(KEY, [{"id": "m1", "message": {}}])  # then a kill
        assert 29.9 * DAY * 1000 < await client.pttl(names(redis_prefix)["history"])
    finally:
        await closed(store, history)


async def test_inspect_finds_only_the_tenants_whose_thread_of_that_id_is_left(
        redis_url: str, redis_prefix: str) -> None:
    """The id's tenant set lives as long as its last thread: it still names a tenant whose
    own thread expired."""
    store, history = await opened(redis_url, redis_prefix, 1.0)
    try:
        store.record_request(KEY, 1000.0, None)
        await store.flush()
        await asyncio.sleep(0.6)
        store.record_request(OTHER_TENANT, 1000.0, None)
        await store.flush()
        await asyncio.sleep(0.6)
        assert [state.key.tenant for state in await store.find(KEY.thread)] == ["tenant-b"]
    finally:
        await closed(store, history)


async def test_an_expired_threads_entry_leaves_the_listing_a_day_after(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    store, history = await opened(redis_url, redis_prefix, DAY)
    threads, digest = f"{redis_prefix}threads", thread_digest(KEY)
    try:
        store.record_request(KEY, 1000.0, None)
        store.record_request(OTHER_TENANT, 1000.0 + 2 * DAY - 1, None)
        await store.flush()
        assert await client.zscore(threads, digest) == 1000.0  # within a day of expiring
        store.record_request(OTHER_TENANT, 1000.0 + 2 * DAY + 1, None)
        await store.flush()
        assert await client.zscore(threads, digest) is None
        assert await client.zscore(threads, thread_digest(OTHER_TENANT)) is not None
    finally:
        await closed(store, history)


async def test_zero_days_sets_no_ttl_and_takes_one_off(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    expiring, history = await opened(redis_url, redis_prefix, 30 * DAY)
    await whole_thread(expiring, history)
    await closed(expiring, history)
    assert all(left > 0 for left in (await ttls(client, redis_prefix)).values())
    kept, history = await opened(redis_url, redis_prefix, 0)
    try:
        await whole_thread(kept, history)
        assert set((await ttls(client, redis_prefix)).values()) == {-1}
        await whole_thread(kept, history, OTHER_TENANT)
        assert set((await ttls(client, redis_prefix, OTHER_TENANT)).values()) == {-1}
    finally:
        await closed(kept, history)


async def test_the_configured_days_reach_the_store_and_the_history(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    settings = StateSettings(backend="redis", retention_days=2,
                             redis=RedisSettings(url=redis_url, prefix=redis_prefix))
    store, history = create_store(settings), create_history(settings)
    await store.open()
    await history.open()
    try:
        await whole_thread(store, history)  # type: ignore[arg-type]
        for what, left in (await ttls(client, redis_prefix)).items():
            assert 1.99 * DAY * 1000 < left <= 2 * DAY * 1000, what
    finally:
        await closed(store, history)


async def test_threads_written_without_a_ttl_get_what_is_left_of_it_when_a_proxy_opens(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    """Written before retention, or with it at 0: no write would ever give them one."""
    recent, idle, timed = (ThreadKey("tenant-a", name) for name in ("recent", "idle", "timed"))
    now = time.time()
    expiring, history = await opened(redis_url, redis_prefix, DAY)
    await whole_thread(expiring, history, timed)
    await closed(expiring, history)
    untimed, history = await opened(redis_url, redis_prefix, 0)
    await whole_thread(untimed, history, recent)
    untimed.record_request(recent, now - 10 * DAY, None)  # its last activity
    untimed.record_request(idle, now - 40 * DAY, None)
    await closed(untimed, history)
    log = LogLines()
    store = RedisStore(redis_url, prefix=redis_prefix, retention_s=30 * DAY, log=log)
    await store.open()
    try:
        for _ in range(200):
            if log.named("state_expiry_set"):
                break
            await asyncio.sleep(0.01)
        assert log.named("state_expiry_set") == [{"threads": 2}]
        left = await ttls(client, redis_prefix, recent)
        assert left.pop("tenants") > 29.9 * DAY * 1000  # shared by the id's threads: all of it
        for what, ms in left.items():
            assert 19.9 * DAY * 1000 < ms <= 20 * DAY * 1000, what
        gone = names(redis_prefix, idle)
        assert 0 < await client.pttl(gone.pop("tenants")) <= 30 * DAY * 1000
        assert not await client.exists(*gone.values())  # idle past the retention: at once
        assert 0 < (await ttls(client, redis_prefix, timed))["thread"] <= DAY * 1000  # its own
    finally:
        await store.close()
