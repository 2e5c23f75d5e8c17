"""What every state store guarantees (proxy/store/base.py), run over SQLite and Redis alike."""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

import pytest

from proxy.records import ThreadKey
from proxy.store import ANCHORS_KEPT, StateStore, StoreError, thread_key_text
from proxy.store.cached import CachedStore
from tests.store_backends import (HOSTILE_IDS, KEY, anchor, any_store, event, mark,  # noqa: F401
                                  reopened)


async def test_an_unknown_thread_loads_empty(any_store: StateStore) -> None:
    state = await any_store.load(KEY)
    assert not state.known and state.key == KEY and state.event is None
    assert await any_store.events(KEY) == [] and await any_store.find(KEY.thread) == []
    assert await any_store.list_threads() == []


async def test_every_record_round_trips_across_reopen(any_store: StateStore) -> None:
    any_store.record_request(KEY, 150.0, 1234)  # after the anchor's time: the touch is read back
    any_store.add_anchor(KEY, anchor(1))
    stored = await any_store.add_event(KEY, event(1))
    await any_store.set_microcompact(KEY, mark(1))
    again = await reopened(any_store)
    try:
        state = await again.load(KEY)
        assert state.key == KEY and state.created_at == 150.0 and state.last_activity == 150.0
        assert state.anchors == (anchor(1),) and state.event == stored == replace(event(1), seq=1)
        assert state.event_count == 1 and state.microcompact == mark(1)
        assert state.last_estimate == 1234
    finally:
        await again.close()


async def test_text_with_lone_surrogates_round_trips(any_store: StateStore) -> None:
    odd = replace(event(1), summary_message={"role": "user", "content": "a\ud800b \udfff"})
    await any_store.add_event(KEY, odd)
    assert (await any_store.load(KEY)).event.summary_message == odd.summary_message  # type: ignore[union-attr]


async def test_checkpoints_get_seq_1_2_3_and_the_latest_wins(any_store: StateStore) -> None:
    seqs = [(await any_store.add_event(KEY, event(n))).seq for n in range(1, 4)]
    state = await any_store.load(KEY)
    assert seqs == [1, 2, 3] and state.event_count == 3
    assert state.event == replace(event(3), seq=3)
    assert await any_store.events(KEY) == [replace(event(n), seq=n) for n in range(1, 4)]


async def test_a_checkpoint_or_mark_creates_its_thread(any_store: StateStore) -> None:
    await any_store.add_event(KEY, event(1))
    other = ThreadKey("tenant-a", "thread-2")
    await any_store.set_microcompact(other, mark(2))
    first, second = await any_store.load(KEY), await any_store.load(other)
    assert (first.created_at, first.last_activity) == (201.0, 201.0)
    assert (second.created_at, second.microcompact) == (302.0, mark(2))


async def test_only_the_latest_anchors_are_kept_latest_first(any_store: StateStore) -> None:
    for n in range(ANCHORS_KEPT * 3):
        any_store.add_anchor(KEY, anchor(n))
        if n % 7 == 0:
            await any_store.flush()  # batches of several sizes
    positions = [a.position for a in (await any_store.load(KEY)).anchors]
    assert positions == list(range(ANCHORS_KEPT * 3 - 1, ANCHORS_KEPT * 2 - 1, -1))


async def test_activity_keeps_the_latest_time_the_first_creation_and_the_last_estimate(
        any_store: StateStore) -> None:
    any_store.record_request(KEY, 10.0, 500)
    any_store.record_request(KEY, 30.0, None)
    any_store.record_request(KEY, 20.0, 700)  # a held-back touch written late
    await any_store.record_requests([(KEY, 25.0, None), (KEY, 5.0, None)])
    state = await any_store.load(KEY)
    # The estimate of the newest touch that gave one. One process writes a thread's estimates
    # in their time order (`proxy/store/cached.py`); over Redis an older one another instance
    # writes late is refused too (`tests/test_store_redis_shared_touches.py`).
    assert (state.created_at, state.last_activity, state.last_estimate) == (10.0, 30.0, 700)


async def test_the_newest_anchor_stands_in_for_a_later_activity(any_store: StateStore) -> None:
    any_store.record_request(KEY, 10.0, None)
    any_store.add_anchor(KEY, anchor(1, at=40.0))
    assert (await any_store.load(KEY)).last_activity == 40.0
    [line] = await any_store.list_threads()
    assert line.last_activity == 40.0
    any_store.record_request(KEY, 50.0, None)
    assert (await any_store.load(KEY)).last_activity == 50.0
    [line] = await any_store.list_threads()
    assert line.last_activity == 50.0


async def test_queued_writes_are_seen_by_the_next_read_without_a_flush(
        any_store: StateStore) -> None:
    any_store.record_request(KEY, 10.0, 99)
    any_store.add_anchor(KEY, anchor(1))
    await any_store.add_origin("resp_1", "primary", time.time())
    state = await any_store.load(KEY)
    assert state.last_estimate == 99 and state.anchors == (anchor(1),)
    any_store.add_anchor(KEY, anchor(2))
    assert [line.thread for line in await any_store.list_threads()] == [KEY.thread]
    assert await any_store.origin("resp_1") == "primary"
    assert await any_store.origin("resp_2") is None


async def test_an_origin_given_again_names_the_latest_upstream(any_store: StateStore) -> None:
    now = time.time()
    await any_store.add_origin("resp_1", "primary", now)
    await any_store.add_origin("resp_1", "backup", now + 1)
    assert await any_store.origin("resp_1") == "backup"


async def test_two_tenants_with_one_thread_id_never_see_each_other(
        any_store: StateStore) -> None:
    mine, theirs = ThreadKey("tenant-a", "shared-id"), ThreadKey("tenant-b", "shared-id")
    await any_store.add_event(mine, event(1, "mine"))
    any_store.add_anchor(theirs, anchor(2))
    assert (await any_store.load(mine)).anchors == ()
    assert (await any_store.load(theirs)).event is None
    assert (await any_store.load(ThreadKey("tenant-c", "shared-id"))).known is False
    found = await any_store.find("shared-id")
    assert [state.key for state in found] == [mine, theirs]
    assert found[0].event_count == 1 and found[1].anchors == (anchor(2),)


async def test_hostile_thread_ids_round_trip_without_collisions(any_store: StateStore) -> None:
    for n, raw in enumerate(HOSTILE_IDS):
        await any_store.add_event(ThreadKey(raw, raw), event(n, content=f"id-{n}"))
    for n, raw in enumerate(HOSTILE_IDS):
        state = await any_store.load(ThreadKey(raw, raw))
        assert state.event is not None and state.event.cutoff_index == n and state.event.seq == 1
        [found] = await any_store.find(raw)
        assert found.key == ThreadKey(thread_key_text(raw), thread_key_text(raw))
    listed = await any_store.list_threads(limit=1000)
    assert sorted(line.thread for line in listed) == sorted(map(thread_key_text, HOSTILE_IDS))
    assert all(line.thread == line.tenant for line in listed)


async def test_list_threads_most_recent_first_with_summary_fields(any_store: StateStore) -> None:
    for n in range(5):
        key = ThreadKey("t", f"th{n}")
        any_store.record_request(key, 1000.0 + n, n * 10)
        await any_store.add_event(key, event(n, at=500.0 + n))
    lines = await any_store.list_threads(limit=3)
    assert [line.thread for line in lines] == ["th4", "th3", "th2"]
    assert (lines[0].tenant, lines[0].created_at, lines[0].last_activity, lines[0].event_count,
            lines[0].last_estimate) == ("t", 1004.0, 1004.0, 1, 40)
    assert len(await any_store.list_threads(limit=0)) == 0
    assert len(await any_store.list_threads(limit=100)) == 5


async def test_many_concurrent_writes_are_all_persisted(any_store: StateStore) -> None:
    async def one(n: int) -> int:
        key = ThreadKey("t", f"th{n % 5}")
        any_store.record_request(key, float(n + 1), n)
        any_store.add_anchor(key, anchor(n))
        return (await any_store.add_event(key, event(n))).seq

    seqs = await asyncio.gather(*(one(n) for n in range(50)))
    assert sorted(seqs) == sorted(list(range(1, 11)) * 5)
    for n in range(5):
        state = await any_store.load(ThreadKey("t", f"th{n}"))
        assert state.event_count == 10 and len(state.anchors) == 10
        assert [e.seq for e in await any_store.events(ThreadKey("t", f"th{n}"))] == list(range(1, 11))


async def test_close_applies_the_queued_writes(any_store: StateStore) -> None:
    for n in range(40):
        any_store.record_request(KEY, 1000.0 + n, n)
        any_store.add_anchor(KEY, anchor(n))
    again = await reopened(any_store)
    try:
        state = await again.load(KEY)
        assert (state.last_activity, state.last_estimate) == (1039.0, 39)
        assert state.anchors[0] == anchor(39)
    finally:
        await again.close()


async def test_calls_on_a_closed_store_fail_clearly_and_close_is_idempotent(
        any_store: StateStore) -> None:
    await any_store.close()
    await any_store.close()
    with pytest.raises(StoreError):
        await any_store.load(KEY)
    with pytest.raises(StoreError):
        any_store.record_request(KEY, 1.0, None)
    with pytest.raises(StoreError):
        any_store.add_anchor(KEY, anchor(1))


async def test_the_compaction_lease_is_held_and_released(any_store: StateStore) -> None:
    async with any_store.compaction_lease(KEY) as lost:
        async with any_store.compaction_lease(ThreadKey("t", "another")):
            pass  # another thread's lease is not in the way
        # A shared store's lease can be lost to another instance; a local lock cannot.
        assert (lost is None) is (not any_store.shared)
        assert lost is None or not lost.done()
    async with any_store.compaction_lease(KEY):  # released: taken again at once
        pass


async def test_the_cache_keeps_states_only_over_a_store_no_other_process_writes(
        any_store: StateStore) -> None:
    cached = CachedStore(any_store)
    state = await cached.load(KEY)
    assert cached.shared is any_store.shared
    assert (cached.cached(KEY) is state) is (not any_store.shared)
    await cached.add_event(KEY, event(1))
    assert (await cached.load(KEY)).event_count == 1
    async with cached.compaction_lease(KEY):
        pass
