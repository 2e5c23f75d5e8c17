"""Touches from several instances on one Redis server: the newest by its time wins.

A thread's last activity and its last estimate are those of its newest touch (by the time the
touch carries), whichever instance made it and whenever it reached Redis: a touch an instance
held back (`proxy/store/cached.py`) and wrote late, or merged into what it loads, never
replaces a newer one another instance wrote meanwhile.
"""

from __future__ import annotations


from proxy.store.cached import CachedStore
from proxy.store.redis_store import RedisStore
from tests.redis_fixtures import redis_store_pair as two  # noqa: F401
from tests.store_backends import KEY, anchor

HOLD = 3600.0  # the held-back touches are written by `flush` only


async def test_a_late_older_touch_keeps_the_stored_newer_estimate(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = two
    a.record_request(KEY, 100.0, 5)
    await a.flush()
    b.record_request(KEY, 50.0, 7)  # older, written later
    await b.flush()
    state = await a.load(KEY)
    assert (state.last_activity, state.last_estimate) == (100.0, 5)
    [line] = await b.list_threads()
    assert (line.last_activity, line.last_estimate) == (100.0, 5)


async def test_a_held_touch_does_not_hide_another_instances_newer_one(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = CachedStore(two[0], write_held_every_s=HOLD), CachedStore(two[1])
    a.record_request(KEY, 1000.0, 1)  # written
    a.record_request(KEY, 1010.0, 2)  # held back
    b.record_request(KEY, 1020.0, 9)  # another instance's, newer: written at once
    await b.store.flush()
    await a.store.flush()
    state = await a.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1020.0, 9)
    await a.flush()  # the held touch reaches Redis late
    state = await b.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1020.0, 9)
    [line] = await a.list_threads()
    assert (line.last_activity, line.last_estimate) == (1020.0, 9)


async def test_a_held_touch_newer_than_the_stored_one_wins(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = CachedStore(two[0], write_held_every_s=HOLD), CachedStore(two[1])
    a.record_request(KEY, 1000.0, 1)
    b.record_request(KEY, 1020.0, 9)
    a.record_request(KEY, 1025.0, 3)  # held back
    a.add_anchor(KEY, anchor(1, at=1026.0))  # its answer, later than the touch
    await b.store.flush()
    state = await a.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1026.0, 3)
    await a.flush()
    [line] = await b.list_threads()
    assert (line.last_activity, line.last_estimate) == (1026.0, 3)
    assert (await b.load(KEY)).last_estimate == 3


async def test_a_newer_touch_without_an_estimate_keeps_the_last_one(
        two: tuple[RedisStore, RedisStore]) -> None:
    a, b = CachedStore(two[0], write_held_every_s=HOLD), CachedStore(two[1])
    a.record_request(KEY, 1000.0, 1)
    a.record_request(KEY, 1010.0, 2)  # held back
    b.record_request(KEY, 1020.0, None)
    await b.store.flush()
    state = await a.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1020.0, 2)
    await a.flush()
    state = await b.load(KEY)
    assert (state.last_activity, state.last_estimate) == (1020.0, 2)
