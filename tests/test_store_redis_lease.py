"""The compaction lease across instances: exclusive, renewed while held, freed by a holder that
died after `lease_s`, never released by one that lost it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest
import redis.asyncio

from proxy.store.redis_keys import RedisKeys, thread_digest
from proxy.store.redis_store import LeaseLost, RedisStore
from tests.process import child_env
from tests.redis_fixtures import redis_client as client  # noqa: F401
from tests.store_backends import KEY, LogLines, event

LEASE_S = 1.0


@pytest.fixture
async def two(redis_url: str, redis_prefix: str) -> AsyncIterator[tuple[RedisStore, RedisStore]]:
    stores = (RedisStore(redis_url, prefix=redis_prefix, lease_s=LEASE_S),
              RedisStore(redis_url, prefix=redis_prefix, lease_s=LEASE_S))
    for store in stores:
        await store.open()
    yield stores
    for store in stores:
        await store.close()


def _lease_of_key(prefix: str) -> str:
    """The Redis key of `KEY`'s compaction lease."""
    return RedisKeys(prefix).lease(thread_digest(KEY))


async def test_holders_never_overlap_across_instances(
        two: tuple[RedisStore, RedisStore]) -> None:
    inside, most, entered = 0, 0, 0

    async def hold(store: RedisStore) -> None:
        nonlocal inside, most, entered
        async with store.compaction_lease(KEY):
            inside += 1
            entered += 1
            most = max(most, inside)
            await asyncio.sleep(0.005)
            inside -= 1

    await asyncio.gather(*(hold(two[n % 2]) for n in range(24)))
    assert (entered, most) == (24, 1)


async def test_a_long_holder_keeps_its_lease_by_renewing_it(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    waiter_in = asyncio.Event()

    async def wait_then_hold() -> float:
        async with b.compaction_lease(KEY):
            waiter_in.set()
            return time.monotonic()

    async with a.compaction_lease(KEY) as lost:
        began = time.monotonic()
        waiter = asyncio.create_task(wait_then_hold())
        await asyncio.sleep(LEASE_S * 2.5)  # well past one lease: renewals keep it
        assert not waiter_in.is_set()
        assert lost is not None and not lost.done()
        released = time.monotonic()
    entered = await asyncio.wait_for(waiter, 2)
    assert entered >= released and entered - began >= LEASE_S * 2.5
    assert entered - released < 0.5  # the waiter's backoff stays short


async def test_a_lease_another_took_is_reported_lost_and_never_released_by_its_old_holder(
        redis_url: str, redis_prefix: str, client: redis.asyncio.Redis) -> None:
    log = LogLines()
    store = RedisStore(redis_url, prefix=redis_prefix, lease_s=LEASE_S, log=log)
    await store.open()
    name = _lease_of_key(redis_prefix)
    try:
        async with store.compaction_lease(KEY) as lost:
            await client.set(name, b"someone-else", px=5000)  # as if ours had run out
            assert lost is not None
            # A renewal finds it, and tells the holder (its compaction stops).
            await asyncio.wait_for(lost, LEASE_S)
            # Named as the compaction's own lines name it: which thread, whose.
            assert log.named("compaction_lease_lost") == [
                {"thread": KEY.thread, "tenant": KEY.tenant, "lease_s": LEASE_S}]
        assert await client.get(name) == b"someone-else"
    finally:
        await store.close()


async def test_a_body_that_fails_releases_the_lease(two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    with pytest.raises(ZeroDivisionError):
        async with a.compaction_lease(KEY):
            1 / 0
    began = time.monotonic()
    async with b.compaction_lease(KEY):
        assert time.monotonic() - began < 0.2


HOLD_AND_WAIT = """
import asyncio, sys
from proxy.records import ThreadKey
from proxy.store.redis_store import LeaseLost, RedisStore

async def main():
    store = RedisStore(sys.argv[1], prefix=sys.argv[2], lease_s=float(sys.argv[3]))
    await store.open()
    async with store.compaction_lease(ThreadKey("tenant-a", "thread-1")):
        print("held", flush=True)
        await asyncio.sleep(3600)

asyncio.run(main())
"""


async def test_a_holder_killed_frees_the_lease_after_lease_s(
        two: tuple[RedisStore, RedisStore], redis_url: str, redis_prefix: str) -> None:
    child = subprocess.Popen([sys.executable, "-c", HOLD_AND_WAIT, redis_url, redis_prefix,
                              str(LEASE_S)], stdout=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"held\n"
        await asyncio.sleep(LEASE_S * 1.2)  # renewed by the live child meanwhile
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.3):
                async with two[0].compaction_lease(KEY):
                    pass
        child.kill()
        killed = time.monotonic()
        async with asyncio.timeout(LEASE_S * 3):
            async with two[0].compaction_lease(KEY):
                freed_after = time.monotonic() - killed
    finally:
        child.kill()
        child.wait()
        if child.stdout is not None:
            child.stdout.close()
    assert freed_after <= LEASE_S + 0.5


async def test_a_checkpoint_of_a_holder_that_lost_its_lease_is_refused(
        two: tuple[RedisStore, RedisStore], client: redis.asyncio.Redis,
        redis_prefix: str) -> None:
    # The new holder may have cut the history back and offloaded its own lines: the stalled
    # holder's checkpoint would count them in its `history_end`.
    a, b = two
    name = _lease_of_key(redis_prefix)
    async with a.compaction_lease(KEY):
        first = await a.add_event(KEY, event(1))
        await client.set(name, b"another-instance", px=5000)  # as if ours had run out
        with pytest.raises(LeaseLost):
            await a.add_event(KEY, event(2))
        await client.delete(name)  # it ran out and nobody took it: nothing to protect
        third = await a.add_event(KEY, event(3))
    assert (first.seq, third.seq) == (1, 2)
    assert [e.summary_message for e in await b.events(KEY)] == [
        event(1).summary_message, event(3).summary_message]
    # Without a lease of its own (no compaction), a write is not the lease's to refuse.
    await client.set(name, b"another-instance", px=5000)
    assert (await b.add_event(KEY, event(4))).seq == 3


async def test_a_checkpoint_of_a_holder_whose_lease_passed_and_ended_is_refused(
        two: tuple[RedisStore, RedisStore], client: redis.asyncio.Redis,
        redis_prefix: str) -> None:
    # Its lease ran out, another instance took it, wrote its checkpoint and let it go: the lease
    # is free again, yet the stalled holder's checkpoint was built on the state before.
    a, b = two
    name = _lease_of_key(redis_prefix)
    async with a.compaction_lease(KEY):
        await client.delete(name)  # as if ours had run out
        async with b.compaction_lease(KEY):
            assert (await b.add_event(KEY, event(1))).seq == 1
        with pytest.raises(LeaseLost):
            await a.add_event(KEY, event(2))
    assert [e.summary_message for e in await a.events(KEY)] == [event(1).summary_message]


async def test_the_lease_check_before_the_history_judges_as_the_checkpoint_does(
        two: tuple[RedisStore, RedisStore], client: redis.asyncio.Redis,
        redis_prefix: str) -> None:
    # Asked before a compaction cuts and appends to the thread's history: a stalled holder
    # must not touch the lines under another holder's committed checkpoint.
    a, b = two
    name = _lease_of_key(redis_prefix)
    async with a.compaction_lease(KEY):
        await a.lease_check(KEY)
        await client.set(name, b"another-instance", px=5000)  # ours ran out, another took it
        with pytest.raises(LeaseLost):
            await a.lease_check(KEY)
        await client.delete(name)  # it ran out and nobody took it
        await a.lease_check(KEY)
        async with b.compaction_lease(KEY):  # another took it, wrote, and let it go
            await b.add_event(KEY, event(1))
        with pytest.raises(LeaseLost):
            await a.lease_check(KEY)
    await b.lease_check(KEY)  # no lease of its own here: nothing to check


async def test_a_release_redis_refused_is_tried_again(monkeypatch) -> None:
    # A stall at the compaction's end: the next compaction of the thread would wait out the
    # rest of the lease (30 s by default) for a holder long done.
    from proxy.store import redis_lease
    monkeypatch.setattr(redis_lease, "RELEASE_RETRY_FIRST_S", 0.05)
    calls: list[tuple[object, ...]] = []

    async def run_script(script: str, keys: tuple[str, ...], args: tuple[str, ...]) -> int:
        calls.append(keys)
        if len(calls) < 3:
            raise redis.exceptions.TimeoutError("stalled")
        return 1

    log = LogLines()
    await redis_lease._release("lease-key", "token", run_script, log, {"thread": "t"}, 5.0)
    assert log.named("compaction_lease_release_failed") == [
        {"thread": "t", "error": "TimeoutError"}]
    for _ in range(100):
        if len(calls) == 3:
            break
        await asyncio.sleep(0.02)
    assert calls == [("lease-key",)] * 3
    assert not redis_lease._RELEASING
