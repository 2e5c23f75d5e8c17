"""A read waits for the queued writes it must see, and only for those.

The writer's batch is stalled on cue (its send waits for an event), so the tests know exactly
which writes are in flight while a read runs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest

from proxy.records import ThreadKey
from proxy.store.redis_store import RedisStore
from proxy.store.redis_writer import Command
from tests.redis_fixtures import redis_store as store  # noqa: F401
from tests.store_backends import anchor

A = ThreadKey("tenant", "thread-a")
B = ThreadKey("tenant", "thread-b")
PROMPT_S = 2.0  # far more than a read on loopback takes; a read that waits waits for ever


class StalledSends:
    """The store's batch sender, held at its next batch until `release`."""

    def __init__(self, store: RedisStore) -> None:
        self._send = store.writer._send
        self.holding = asyncio.Event()
        self._released = asyncio.Event()
        store.writer._send = self.send

    async def send(self, batch: Sequence[Command]) -> tuple[int, BaseException | None]:
        if not self._released.is_set():
            self.holding.set()
            await self._released.wait()
        return await self._send(batch)

    def release(self) -> None:
        self._released.set()


@pytest.fixture
async def stalled(store: RedisStore) -> AsyncIterator[StalledSends]:
    held = StalledSends(store)
    yield held
    held.release()  # a failed test's batch too: `close` waits for it


async def test_a_load_does_not_wait_for_a_stalled_batch_of_another_thread(
        store: RedisStore, stalled: StalledSends) -> None:
    store.record_request(A, 100.0, 7)
    await stalled.holding.wait()  # A's batch in flight, held
    store.add_anchor(A, anchor(1))  # and one queued behind it
    state = await asyncio.wait_for(store.load(B), PROMPT_S)
    assert state.known is False


async def test_a_load_of_the_stalled_thread_waits_and_sees_its_writes(
        store: RedisStore, stalled: StalledSends) -> None:
    store.record_request(A, 100.0, 7)
    await stalled.holding.wait()
    store.add_anchor(A, anchor(1))
    loading = asyncio.ensure_future(store.load(A))
    await asyncio.sleep(0.05)
    assert not loading.done()
    stalled.release()
    state = await asyncio.wait_for(loading, PROMPT_S)
    assert (state.last_estimate, state.anchors) == (7, (anchor(1),))


async def test_an_origin_read_waits_only_for_its_own_write(
        store: RedisStore, stalled: StalledSends) -> None:
    await store.add_origin("made-1", "up-1", time.time())
    await stalled.holding.wait()
    assert await asyncio.wait_for(store.origin("made-2"), PROMPT_S) is None
    await store.add_origin("made-2", "up-2", time.time())  # queued behind the stalled batch
    reading = asyncio.ensure_future(store.origin("made-2"))
    await asyncio.sleep(0.05)
    assert not reading.done()
    stalled.release()
    assert await asyncio.wait_for(reading, PROMPT_S) == "up-2"
    assert await store.origin("made-1") == "up-1"


async def test_listings_and_flush_still_wait_for_every_queued_write(
        store: RedisStore, stalled: StalledSends) -> None:
    store.record_request(A, 100.0, 7)
    await stalled.holding.wait()
    listing = asyncio.ensure_future(store.list_threads())
    flushing = asyncio.ensure_future(store.flush())
    await asyncio.sleep(0.05)
    assert not listing.done() and not flushing.done()
    stalled.release()
    [line] = await asyncio.wait_for(listing, PROMPT_S)
    await asyncio.wait_for(flushing, PROMPT_S)
    assert (line.thread, line.last_estimate) == (A.thread, 7)
