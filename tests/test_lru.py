"""The bounded caches of the hot path."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from proxy.lru import LRU


def test_update_changes_a_present_value_and_makes_it_the_newest() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.update("a", lambda value, step: value + step, 10)
    cache.put("c", 3)  # evicts the oldest: "b", since "a" was just updated
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (11, None, 3)


def test_update_leaves_an_absent_key_absent() -> None:
    cache: LRU[str, int] = LRU(2)
    calls: list[int] = []
    cache.update("a", lambda value: calls.append(value) or value)
    assert cache.get("a") is None and not calls and len(cache) == 0


@given(st.lists(st.tuples(st.integers(0, 9), st.integers()), max_size=8),
       st.lists(st.integers(0, 9), max_size=6, unique=True), st.integers(1, 12))
def test_put_many_leaves_what_one_put_each_leaves_and_peek_many_reads_without_reordering(
        before: list[tuple[int, int]], keys: list[int], max_entries: int) -> None:
    many, each = LRU[int, int](max_entries), LRU[int, int](max_entries)
    for key, value in before:
        many.put(key, value)
        each.put(key, value)
    order = list(many._data.items())
    assert many.peek_many(keys, -1) == [dict(order).get(k, -1) for k in keys]
    assert list(many._data.items()) == order  # a peek makes nothing newer
    values = [k * 10 for k in keys]
    many.put_many(keys, values)
    for key, value in zip(keys, values):
        each.put(key, value)
    assert len(many) <= max_entries
    if len(each) + len(keys) <= max_entries:  # nothing dropped: the very same order
        assert list(many._data.items()) == list(each._data.items())
    else:  # the keys put are kept whenever they fit, and are the newest
        kept = keys[-max_entries:]
        assert list(many._data.items())[-len(kept):] == [(k, k * 10) for k in kept]
