"""Lists a whole-list check has passed, remembered so the next request's check starts late.

An agent resends its whole thread on every request: the list is the last request's list and a
few entries after it. A check that walks the list front to back can start at the end of a list
it passed before, when this list opens with the same entries, given what passing that list left
for the entries after it: its state (repair's chat check: nothing, every call is answered at
the end of a valid list; Responses: whether an `item_reference` came).

"The same entries" is read from their `key`s, the digests of their bytes: a made entry that is
built afresh on every request (a summary) matches as well as a client's reused one. A record is
the digest of a passed list's keys, with its state, filed under its last key; it is trusted
only when this list's leading keys digest to it. A list's entries share one `api` (each list is
parsed from one request), so the same bytes in the same place say the same thing. Bounded: one
small record per check, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from operator import attrgetter
from typing import Generic, TypeVar

from proxy.conversation import Entries
from proxy.lru import LRU

S = TypeVar("S")
# (entries, start, the state entries[:start] left) -> the state all of them leave, None: failed
Walk = Callable[[Entries, int, S], S | None]

_KEY = attrgetter("key")
_KEY_BYTES = 16  # `Entry.key` is a 16-byte blake2b digest
# How far from the end a passed list may have ended: a steady request adds an answer and the
# next message, or a step's calls and results.
_PROBES = 32


class CheckedLists(Generic[S]):
    def __init__(self, max_lists: int, empty: S) -> None:
        """`empty`: the state of the empty list, where a walk from the start begins."""
        self._empty = empty
        # last key -> (length, digest of the keys, state)
        self._lists: LRU[bytes, tuple[int, bytes, S]] = LRU(max_lists)

    def check(self, entries: Entries, walk: Walk[S]) -> bool:
        """Whether `walk(entries, 0, empty)` passes, started where a passed list ends instead.

        `walk(entries, start, state)` must judge `entries` as a whole when `entries[:start]`
        is a list it passed, leaving `state`."""
        return self.walked(entries, walk) is not None

    def walked(self, entries: Entries, walk: Walk[S]) -> S | None:
        """The state `walk(entries, 0, empty)` leaves (None: failed), walked the same way as
        `check` walks: a fold that never fails resumes like a check."""
        joined = _joined_keys(entries)
        if joined is None:
            return walk(entries, 0, self._empty)
        start, state, digest = self._start(entries, joined)
        found = walk(entries, start, state)
        if found is None:
            return None
        if start < len(entries):
            digest.update(joined[start * _KEY_BYTES:])
            self._lists.put(entries[-1].key,  # type: ignore[arg-type]
                            (len(entries), digest.digest(), found))
        return found

    def _start(self, entries: Entries, joined: memoryview) -> tuple[int, S, hashlib.blake2b]:
        """The longest passed list `entries` opens with (its length and state), looked for
        among the last `_PROBES` ends; and the digest of its keys, to go on with."""
        get = self._lists.get
        for end in range(len(entries), max(0, len(entries) - _PROBES), -1):
            found = get(entries[end - 1].key)  # type: ignore[arg-type]
            if found is not None and found[0] == end:
                digest = hashlib.blake2b(joined[:end * _KEY_BYTES], digest_size=16)
                if digest.digest() == found[1]:
                    return end, found[2], digest
        return 0, self._empty, hashlib.blake2b(digest_size=16)

    def __len__(self) -> int:
        return len(self._lists)


def _joined_keys(entries: Entries) -> memoryview | None:
    """The entries' keys end to end (one join, in C); None when one has none or an odd size."""
    if not entries:
        return None
    try:
        joined = b"".join(map(_KEY, entries))
    except TypeError:  # a made entry not keyed yet
        return None
    return memoryview(joined) if len(joined) == _KEY_BYTES * len(entries) else None
