"""What only the Redis store has: its key layout, its expiring origins, its refusals of values
it cannot read."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio

from proxy.records import ThreadKey
from proxy.store import StoreError
from proxy.store.redis_keys import RedisKeys, thread_digest
from proxy.store.redis_store import RedisStore
from proxy.store.sqlite_db import ORIGINS_KEPT_S
from tests.redis_fixtures import redis_client as client, redis_store as store  # noqa: F401
from tests.store_backends import HOSTILE_IDS, KEY, anchor, event, mark


async def test_key_names_hold_digests_never_a_thread_id_or_tenant(
        store: RedisStore, client: redis.asyncio.Redis, redis_prefix: str) -> None:
    for n, raw in enumerate(HOSTILE_IDS):
        key = ThreadKey(f"tenant-{raw}", raw)
        store.record_request(key, 10.0, 1)
        store.add_anchor(key, anchor(n))
        await store.add_event(key, event(n))
        await store.set_microcompact(key, mark(n))
        await store.add_origin(f"resp-{raw}", "up", time.time())
    await store.flush()
    names = [name async for name in client.scan_iter(match=f"{redis_prefix}*", count=1000)]
    keys = RedisKeys(redis_prefix)
    expected = {keys.version.encode(), keys.threads.encode()}
    for raw in HOSTILE_IDS:
        digest = thread_digest(ThreadKey(f"tenant-{raw}", raw))
        expected |= {keys.thread(digest).encode(), keys.anchors(digest).encode(),
                     keys.events(digest).encode()}
    assert expected <= set(names)
    for name in names:
        kind, _, digest = name[len(redis_prefix):].partition(b":")
        assert kind in (b"version", b"threads") or (
            kind in (b"t", b"a", b"e", b"f", b"o") and len(digest) == 64 and digest.isalnum())


async def test_origins_expire_after_the_sqlite_stores_retention(
        store: RedisStore, client: redis.asyncio.Redis, redis_prefix: str) -> None:
    now = time.time()
    await store.add_origin("resp_1", "primary", now)
    await store.add_origin("resp_old", "primary", now - ORIGINS_KEPT_S - 5)
    assert await store.origin("resp_1") == "primary"
    assert await store.origin("resp_old") is None  # made before the retention: gone
    left_s = await client.pttl(RedisKeys(redis_prefix).origin("resp_1")) / 1000
    assert ORIGINS_KEPT_S - 60 < left_s <= ORIGINS_KEPT_S


async def test_an_origin_is_forgotten_once_its_retention_passed(redis_url: str,
                                                                redis_prefix: str) -> None:
    store = RedisStore(redis_url, prefix=redis_prefix, origins_kept_s=0.3)
    await store.open()
    try:
        await store.add_origin("resp_1", "primary", time.time())
        assert await store.origin("resp_1") == "primary"
        await asyncio.sleep(0.5)
        assert await store.origin("resp_1") is None
    finally:
        await store.close()


@pytest.mark.parametrize("kind,damage", [
    ("anchor", lambda keys, d: ("LPUSH", keys.anchors(d), b"{not json")),
    ("checkpoint", lambda keys, d: ("RPUSH", keys.events(d), b'{"seq": 2, "nope": 1}')),
    ("microcompaction mark", lambda keys, d: ("HSET", keys.thread(d), "microcompact", b"[1]")),
    ("thread's estimate", lambda keys, d: ("HSET", keys.thread(d), "last_estimate", b"x")),
])
async def test_a_value_that_does_not_decode_raises_a_store_error_naming_what_it_is(
        store: RedisStore, client: redis.asyncio.Redis, kind: str, damage: object) -> None:
    await store.add_event(KEY, event(1))
    await client.execute_command(*damage(store.keys, thread_digest(KEY)))  # type: ignore[operator]
    with pytest.raises(StoreError) as raised:
        await store.load(KEY)
        await store.events(KEY)
    assert f"A stored {kind} in the proxy's Redis state cannot be decoded" in str(raised.value)
    assert raised.value.__cause__ is None and raised.value.__suppress_context__


async def test_a_layout_newer_than_this_proxy_is_refused_at_open(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    await client.set(f"{redis_prefix}version", b"2")
    store = RedisStore(redis_url, prefix=redis_prefix)
    with pytest.raises(StoreError, match="written by a newer proxy"):
        await store.open()
    with pytest.raises(StoreError):
        await store.load(KEY)


async def test_prefixes_keep_two_states_apart(redis_url: str, redis_prefix: str) -> None:
    first = RedisStore(redis_url, prefix=redis_prefix + "one:")
    second = RedisStore(redis_url, prefix=redis_prefix + "two:")
    await first.open()
    await second.open()
    try:
        await first.add_event(KEY, event(1))
        assert (await second.load(KEY)).known is False
        assert await second.list_threads() == []
    finally:
        await first.close()
        await second.close()
