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

from collections.abc import Callable, Hashable
from typing import TypeVar

from proxy.conversation import Entry

T = TypeVar("T")
_MISSING = object()


def memoized(entry: Entry, key: Hashable, compute: Callable[[Entry], T]) -> T:
    """`compute(entry)`, computed at most once per entry and key."""
    found = entry.memo.get(key, _MISSING)
    if found is _MISSING:
        found = entry.memo[key] = compute(entry)
    return found  # type: ignore[return-value]
