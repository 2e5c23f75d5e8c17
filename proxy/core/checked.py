"""Lists a whole-list check has passed, remembered so the next request's check starts late.

An agent resends its whole thread on every request: the list is the last request's list and a
few entries after it. A check that walks the list front to back can start at the end of a list
it passed before, when this list opens with the same entries, if passing a list leaves nothing
open that the entries after it could change (repair's chat check: at the end of a valid list
every call is answered, so what follows is judged as if it opened a list).

"The same entries" is read from their `key`s, the digests of their bytes: a made entry that is
built afresh on every request (a summary) matches as well as a client's reused one. A record is
the digest of a passed list's keys, filed under its last key; it is trusted only when this
list's leading keys digest to it. A list's entries share one `api` (each list is parsed from
one request), so the same bytes in the same place say the same thing. Bounded: one small
record per check, the least recently used dropped first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from operator import attrgetter

from proxy.conversation import Entries
from proxy.lru import LRU

CheckFrom = Callable[[Entries, int], bool]  # (entries, start) -> passed, reading entries[start:]

_KEY = attrgetter("key")
_KEY_BYTES = 16  # `Entry.key` is a 16-byte blake2b digest
# How far from the end a passed list may have ended: a steady request adds an answer and the
# next message, or a step's calls and results.
_PROBES = 32


class CheckedLists:
    def __init__(self, max_lists: int) -> None:
        self._lists: LRU[bytes, tuple[int, bytes]] = LRU(max_lists)  # last key -> (length, digest)

    def check(self, entries: Entries, check_from: CheckFrom) -> bool:
        """`check_from(entries, 0)`, started where a list this check passed ends instead.

        `check_from(entries, start)` must judge `entries` as a whole when `entries[:start]` is
        a list it passed."""
        joined = _joined_keys(entries)
        if joined is None:
            return check_from(entries, 0)
        start, digest = self._start(entries, joined)
        if not check_from(entries, start):
            return False
        if start < len(entries):
            digest.update(joined[start * _KEY_BYTES:])
            self._lists.put(entries[-1].key, (len(entries), digest.digest()))  # type: ignore[arg-type]
        return True

    def _start(self, entries: Entries, joined: memoryview) -> tuple[int, hashlib.blake2b]:
        """The longest passed list `entries` opens with (its length), looked for among the
        last `_PROBES` ends; and the digest of its keys, to go on with."""
        get = self._lists.get
        for end in range(len(entries), max(0, len(entries) - _PROBES), -1):
            found = get(entries[end - 1].key)  # type: ignore[arg-type]
            if found is not None and found[0] == end:
                digest = hashlib.blake2b(joined[:end * _KEY_BYTES], digest_size=16)
                if digest.digest() == found[1]:
                    return end, digest
        return 0, hashlib.blake2b(digest_size=16)

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
