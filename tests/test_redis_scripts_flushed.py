"""A server that forgot the scripts (`SCRIPT FLUSH`, or a restart) is served as before.

The store and the history run their Lua scripts one way (`proxy/store/redis_eval.py`): by
digest, loaded again on NOSCRIPT, which the server answers without running anything. So each
write below, whether queued in a pipelined batch or awaited alone, is applied exactly once.
"""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from proxy.store.redis_history import RedisHistory
from proxy.store.redis_store import RedisStore
from tests.redis_fixtures import (  # noqa: F401
    redis_client as raw, redis_store as store, redis_history as history)
from tests.store_backends import KEY, anchor, event, mark


async def test_queued_writes_after_a_script_flush_are_applied_once(
        store: RedisStore, raw: aioredis.Redis) -> None:
    await raw.script_flush()
    store.record_request(KEY, 100.0, 5)
    store.add_anchor(KEY, anchor(1))
    await store.add_origin("made-1", "up-1", time.time())  # not a script, in the same batch
    store.add_anchor(KEY, anchor(2))
    await store.flush()
    assert store.writer.failed == 0
    state = await store.load(KEY)
    assert state.anchors == (anchor(2), anchor(1)) and state.last_estimate == 5
    assert await store.origin("made-1") == "up-1"


async def test_awaited_writes_and_reads_after_a_script_flush_are_applied_once(
        store: RedisStore, raw: aioredis.Redis) -> None:
    await raw.script_flush()
    assert (await store.add_event(KEY, event(1))).seq == 1
    await raw.script_flush()
    await store.set_microcompact(KEY, mark(1))
    await raw.script_flush()
    await store.record_requests([(KEY, 200.0, 7)])
    await raw.script_flush()
    state = await store.load(KEY)
    assert (state.event_count, state.microcompact, state.last_estimate) == (1, mark(1), 7)
    assert [e.seq for e in await store.events(KEY)] == [1]
    await raw.script_flush()
    async with store.compaction_lease(KEY):  # its release is a script too
        pass
    async with store.compaction_lease(KEY):  # so taken again at once
        assert (await store.add_event(KEY, event(2))).seq == 2


async def test_history_writes_after_a_script_flush_are_applied_once(
        history: RedisHistory, raw: aioredis.Redis) -> None:
    await raw.script_flush()
    appended = await history.offload_async(KEY, [{"n": 1}, {"n": 2}], at=1.0)
    assert (appended.start, appended.end) == (0, 2)
    await raw.script_flush()
    again = await history.offload_async(KEY, [{"n": 3}], at=2.0)
    assert (again.start, again.end) == (2, 3)
    await raw.script_flush()
    assert await history.retract_async(again) is True
    await raw.script_flush()
    discarded = await history.discard_tail_async(KEY, 1)
    assert (discarded.size, discarded.lines) == (1, 1)
    contents = await history.read_async(history.path_for(KEY))
    assert contents.records == [{"seq": 1, "at": 1.0, "record": {"n": 1}}]
