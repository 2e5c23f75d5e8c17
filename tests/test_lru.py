"""The bounded caches of the hot path."""

from __future__ import annotations

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
