"""Bounded least-recently-used mappings: the caches of the hot path must never grow without end.

`LRU` bounds the number of entries; `WeightedLRU` bounds their total weight (bytes held), for
caches whose values differ a lot in size; `Memo` remembers a pure function of what clients
send the same way on every request (ids, credentials, model names).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import repeat
from typing import Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


class LRU(Generic[K, V]):
    def __init__(self, max_entries: int) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self.max_entries = max_entries
        self._data: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._data.get(key)
        if value is not None:
            self._data.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._data[key] = value
        self._data.move_to_end(key)
        if len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def update(self, key: K, change: Callable[..., V], *args: object) -> None:
        """`change(value, *args)` as the key's new value, now the newest; nothing when absent.
        One call for the read and the write of a read-modify-write."""
        data = self._data
        found = data.get(key)
        if found is not None:
            data[key] = change(found, *args)
            data.move_to_end(key)

    def peek_many(self, keys: Iterable[K], default: V | None = None) -> list[V | None]:
        """The value of each key (`default` when absent), looked up in C; nothing made newer."""
        return list(map(self._data.get, keys, repeat(default)))

    def put_many(self, keys: Sequence[K], values: Iterable[V]) -> None:
        """`put` of each key (distinct keys) and value, in order, in C; the oldest entries
        past `max_entries` are dropped after all are in, so none of these is."""
        data = self._data
        data.update(zip(keys, values))
        deque(map(data.move_to_end, keys), maxlen=0)
        while len(data) > self.max_entries:
            data.popitem(last=False)

    def pop(self, key: K) -> V | None:
        return self._data.pop(key, None)

    def __len__(self) -> int:
        return len(self._data)

    def __contains__(self, key: object) -> bool:
        """Whether it holds `key`; nothing made newer."""
        return key in self._data

    def __iter__(self) -> Iterator[K]:
        """The keys held, least recently used first (a copy: the cache may change meanwhile)."""
        return iter(list(self._data))


class Memo(dict[K, V]):
    """`compute(key)`, remembered: a hit is one dict lookup, made in C. Only keys of at most
    `max_chars` characters (as `chars` measures them) are kept, at most `max_entries` of them
    (all dropped at once when full: the keys clients repeat come back at once), so the memo
    stays small whatever clients send. A `compute` that raises remembers nothing."""

    def __init__(self, compute: Callable[[K], V], *, max_entries: int, max_chars: int,
                 chars: Callable[[K], int] = len) -> None:
        super().__init__()
        self._compute = compute
        self._max_entries = max_entries
        self._max_chars = max_chars
        self._chars = chars

    def __missing__(self, key: K) -> V:
        value = self._compute(key)
        if self._chars(key) <= self._max_chars:
            if len(self) >= self._max_entries:
                self.clear()
            self[key] = value
        return value


class WeightedLRU(Generic[K, V]):
    def __init__(self, max_weight: int, weigh: Callable[[V], int]) -> None:
        self.max_weight = max_weight
        self._weigh = weigh
        self._data: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self.weight = 0

    def get(self, key: K) -> V | None:
        found = self._data.get(key)
        if found is None:
            return None
        self._data.move_to_end(key)
        return found[0]

    def put(self, key: K, value: V) -> None:
        old = self._data.pop(key, None)
        if old is not None:
            self.weight -= old[1]
        weight = self._weigh(value)
        if weight > self.max_weight:
            return  # larger than the whole cache: not worth evicting everything else for
        self._data[key] = (value, weight)
        self.weight += weight
        while self.weight > self.max_weight:
            _, (_, dropped) = self._data.popitem(last=False)
            self.weight -= dropped

    def __len__(self) -> int:
        return len(self._data)
