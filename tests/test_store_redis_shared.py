"""Several proxy instances on one Redis server: each sees the others' writes at once."""

from __future__ import annotations

import asyncio


from proxy.records import ThreadKey
from proxy.store.cached import CachedStore
from proxy.store.redis_store import RedisStore
from tests.redis_fixtures import redis_store_pair as two  # noqa: F401
from tests.store_backends import KEY, anchor, event


async def test_an_anchor_written_by_one_is_loaded_by_the_other(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    a.add_anchor(KEY, anchor(1))
    await a.flush()
    assert (await b.load(KEY)).anchors == (anchor(1),)


async def test_queued_writes_reach_the_server_without_a_flush(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    a.add_anchor(KEY, anchor(1))  # nothing waits for company: sent at once
    for _ in range(200):
        if (await b.load(KEY)).anchors:
            break
        await asyncio.sleep(0.005)
    assert (await b.load(KEY)).anchors == (anchor(1),)


async def test_checkpoint_seqs_stay_consecutive_when_instances_alternate(
        two: tuple[RedisStore, RedisStore]) -> None:
    seqs = [(await two[n % 2].add_event(KEY, event(n))).seq for n in range(1, 7)]
    assert seqs == [1, 2, 3, 4, 5, 6]
    state = await two[0].load(KEY)
    assert state.event_count == 6 and state.event is not None and state.event.cutoff_index == 6


async def test_concurrent_checkpoints_from_two_instances_get_distinct_consecutive_seqs(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    stored = await asyncio.gather(*(store.add_event(KEY, event(n))
                                    for n in range(40) for store in (a, b)))
    assert sorted(e.seq for e in stored) == list(range(1, 81))
    state = await b.load(KEY)
    events = await a.events(KEY)
    assert [e.seq for e in events] == list(range(1, 81)) and state.event_count == 80
    assert state.event == events[-1]
    by_seq = {e.seq: e for e in stored}
    assert all(by_seq[e.seq] == e for e in events)  # each seq holds what its writer was told


async def test_activity_keeps_the_latest_time_whichever_instance_writes_last(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    a.record_request(KEY, 100.0, 5)
    await a.flush()
    b.record_request(KEY, 50.0, None)  # an older touch, held back and written late
    await b.flush()
    state = await a.load(KEY)
    assert (state.created_at, state.last_activity, state.last_estimate) == (100.0, 100.0, 5)
    [line] = await b.list_threads()
    assert line.last_activity == 100.0


async def test_cached_stores_over_redis_see_each_others_writes(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = CachedStore(two[0]), CachedStore(two[1])
    assert (await a.load(KEY)).known is False
    assert a.cached(KEY) is None  # nothing kept across requests
    b.add_anchor(KEY, anchor(1))
    stored = await b.add_event(KEY, event(1))
    b.record_request(KEY, 500.0, 42)
    await b.flush()
    state = await a.load(KEY)
    assert state.event == stored and state.anchors == (anchor(1),) and state.last_estimate == 42


async def test_the_cache_over_redis_adds_the_touch_it_holds_back(
        two: tuple[RedisStore, RedisStore]) -> None:
    a = CachedStore(two[0], write_held_every_s=3600.0)
    a.record_request(KEY, 1000.0, 1)  # written
    a.record_request(KEY, 1010.0, 2)  # held back for the interval
    await two[0].flush()
    assert (await two[1].load(KEY)).last_activity == 1000.0
    state = await a.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1010.0, 2)
    other = ThreadKey("t", "x")
    assert (await a.load(other)).known is False
