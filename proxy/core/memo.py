"""Facts derived from one entry, computed once and kept on it (`Entry.memo`).

A steady thread resends the same messages on every request and the server hands the cascade
the very same `Entry` objects again, so a fact that depends only on the entry (and on settings
named in its key) is worth keeping on the entry: the next request pays a dictionary read.
Keys are tuples that open with the owning module's name (`("collapse.explores", tools)`), so
two modules never share one by accident; a fact that depends on settings puts them in the key.
Values that depend on *other* entries are not facts of one entry: those carry the entries they
were computed from and are checked by identity before reuse (see `collapse.record_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from itertools import compress, count, repeat
from operator import attrgetter, is_
from typing import TypeVar

from proxy.conversation import Entry

T = TypeVar("T")
_MISSING = object()
_MEMO = attrgetter("memo")


def memoized(entry: Entry, key: Hashable, compute: Callable[[Entry], T]) -> T:
    """`compute(entry)`, computed at most once per entry and key."""
    found = entry.memo.get(key, _MISSING)
    if found is _MISSING:
        found = entry.memo[key] = compute(entry)
    return found  # type: ignore[return-value]


def memoized_each(entries: Iterable[Entry], key: Hashable, compute: Callable[[Entry], T]) -> list[T]:
    """`memoized(entry, key, compute)` for each entry; the reads of facts already known are made
    in C, so a steady thread pays no Python step for its old entries."""
    entries = list(entries)
    # `dict.get` mapped over the memos, not a `methodcaller`: that one looks the method up and
    # calls it with an argument tuple for each entry, twice the instructions (callgrind).
    found = list(map(dict.get, map(_MEMO, entries), repeat(key), repeat(_MISSING)))
    for i in compress(count(), map(is_, found, repeat(_MISSING))):
        found[i] = memoized(entries[i], key, compute)
    return found
