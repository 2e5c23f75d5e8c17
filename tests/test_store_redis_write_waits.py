"""A write that waits, and an answer's wait for its own writes, wait for the queued writes of
their own thread (or id) only: another thread's batch that Redis is slow to answer holds up
nothing else. The writer's batches are stalled on cue (`tests/test_store_redis_read_waits.py`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

import pytest

from proxy.conversation import Api
from proxy.records import ThreadKey, ThreadState
from proxy.server.origins import Origins
from proxy.store.redis_store import RedisStore
from proxy.store.redis_writer import Command
from tests.redis_fixtures import redis_store as store  # noqa: F401
from tests.store_backends import LogLines, anchor, event, mark
from tests.test_server_origins import A as UP_A
from tests.test_server_origins import B as UP_B
from tests.test_server_origins import _prepared
from tests.test_store_redis_read_waits import PROMPT_S, StalledSends, stalled  # noqa: F401

A = ThreadKey("tenant", "thread-a")
B = ThreadKey("tenant", "thread-b")
WRITES = ["record_requests", "add_event", "set_microcompact"]


async def _write(store: RedisStore, write: str, key: ThreadKey) -> None:  # noqa: F811
    if write == "record_requests":
        await store.record_requests([(key, 150.0, 9)])
    elif write == "add_event":
        await store.add_event(key, event(1))
    else:
        await store.set_microcompact(key, mark(1))


def _written(state: ThreadState, write: str) -> object:
    """What `_write` left in the thread's state."""
    return {"record_requests": state.last_estimate, "add_event": state.event_count,
            "set_microcompact": state.microcompact}[write]


EXPECTED = {"record_requests": 9, "add_event": 1, "set_microcompact": mark(1)}


@pytest.mark.parametrize("write", WRITES)
async def test_an_awaited_write_does_not_wait_for_a_stalled_batch_of_another_thread(
        store: RedisStore, stalled: StalledSends, write: str) -> None:  # noqa: F811
    store.record_request(A, 100.0, 7)
    await stalled.holding.wait()  # A's batch in flight, held
    store.add_anchor(A, anchor(1))  # and one queued behind it
    await asyncio.wait_for(_write(store, write, B), PROMPT_S)
    assert _written(await store.load(B), write) == EXPECTED[write]


@pytest.mark.parametrize("write", WRITES)
async def test_an_awaited_write_of_the_stalled_thread_lands_after_its_queued_writes(
        store: RedisStore, stalled: StalledSends, write: str) -> None:  # noqa: F811
    store.record_request(A, 100.0, 7)
    await stalled.holding.wait()
    store.add_anchor(A, anchor(1))
    writing = asyncio.ensure_future(_write(store, write, A))
    await asyncio.sleep(0.05)
    assert not writing.done()
    stalled.release()
    await asyncio.wait_for(writing, PROMPT_S)
    state = await store.load(A)
    # The touch made the thread: a write run before it would have dated it by its own time.
    assert (state.created_at, state.anchors) == (100.0, (anchor(1),))
    assert _written(state, write) == EXPECTED[write]


class HeldAfterFirst:
    """The store's batch sender: while the first batch is in flight, `meanwhile` queues other
    writes, and every later batch is held until `release`."""

    def __init__(self, store: RedisStore, meanwhile: Callable[[], None]) -> None:  # noqa: F811
        self._send = store.writer._send
        self._meanwhile: Callable[[], None] | None = meanwhile
        self._released = asyncio.Event()
        self.held = 0
        store.writer._send = self.send

    async def send(self, batch: Sequence[Command]) -> tuple[int, BaseException | None]:
        meanwhile, self._meanwhile = self._meanwhile, None
        if meanwhile is not None:
            meanwhile()
        elif not self._released.is_set():
            self.held += 1
            await self._released.wait()
        return await self._send(batch)

    def release(self) -> None:
        self._released.set()


async def test_a_threads_written_waits_for_its_own_batch_not_the_one_behind_it(
        store: RedisStore) -> None:  # noqa: F811
    sends = HeldAfterFirst(store, lambda: store.record_request(B, 100.0, 7))
    try:
        store.add_anchor(A, anchor(1))
        await asyncio.wait_for(store.written(A), PROMPT_S)
        assert sends.held == 1  # B's batch, still held
        assert (await store.load(A)).anchors == (anchor(1),)
        flushing = asyncio.ensure_future(store.flush())
        await asyncio.sleep(0.05)
        assert not flushing.done()
    finally:
        sends.release()
    await asyncio.wait_for(flushing, PROMPT_S)


async def test_an_answers_origin_waits_for_its_own_write_not_the_ones_behind_it(
        store: RedisStore) -> None:  # noqa: F811
    """Another thread's writes queued while the origin's batch is in flight, and held: the
    answer does not wait for them (its wait would run out, `origin_not_recorded`)."""
    sends = HeldAfterFirst(store, lambda: store.record_request(B, 100.0, 7))
    log = LogLines()
    origins = Origins({"a": UP_A, "b": UP_B}, store, time.time, log)
    try:
        await origins.answer_made(_prepared(Api.RESPONSES, {}), b'{"id": "resp_1"}')
        assert sends.held == 1
    finally:
        sends.release()
    assert log.named("origin_not_recorded") == []
    assert await store.origin("resp_1") == "a"
