"""One compaction per thread at a time, and what the requests that waited for it learn.

Requests on one thread (an agent's retry, two tabs) take turns at its compaction: each holds
the thread's lock while it compacts. A request that waited reuses the checkpoint the one before
it wrote (the flow reads the store for that); when that one's summary failed instead, the
request that waited shares the failure rather than repeating it at once: a summarizer that just
timed out would make each request in the queue wait out its timeout again, and a single thread's
burst would count as several failures towards the breaker every thread shares.

A thread's turns live only while a request holds or waits for them (weakly kept): a failure
nobody waited for is forgotten, and the next request tries again, as the breaker allows.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from proxy.records import ThreadKey

# The failures of the summarizer's side, which the breaker counts. A post-check failure belongs
# to its request's content (another tab's may pass), a cancellation to the shutdown.
SHARED_STAGES = ("summarize", "checkpoint")


@dataclass(frozen=True)
class SharedFailure:
    stage: str
    reason: str


class ThreadTurn:
    """A thread's compaction lock, and the failures of the compactions run under it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.failures = 0  # how many have failed so far: a waiter notes it before it waits
        self.last: SharedFailure | None = None
        self.waiting = 0  # requests waiting for the lock

    @asynccontextmanager
    async def take(self) -> AsyncIterator[SharedFailure | None]:
        """Hold the thread's lock; yields the failure of a compaction that ended while this
        request waited for it, if one did."""
        seen = self.failures
        self.waiting += 1
        try:
            await self.lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield self.failure_since(seen)
        finally:
            self.lock.release()

    def failed(self, stage: str, reason: str) -> None:
        if stage in SHARED_STAGES:
            self.failures += 1
            self.last = SharedFailure(stage, reason)

    def failure_since(self, seen: int) -> SharedFailure | None:
        """The latest failure when one came after `seen` (the count when the request began
        to wait), else None."""
        return self.last if self.failures > seen else None


class ThreadTurns:
    def __init__(self) -> None:
        self._turns: weakref.WeakValueDictionary[ThreadKey, ThreadTurn] = (
            weakref.WeakValueDictionary())

    def of(self, key: ThreadKey) -> ThreadTurn:
        found = self._turns.get(key)
        if found is None:
            found = ThreadTurn()
            self._turns[key] = found
        return found

    def running(self, key: ThreadKey) -> bool:
        """A compaction of this thread holds its lock (perhaps detached, or the breaker's trial)."""
        found = self._turns.get(key)
        return found is not None and found.lock.locked()

    def waiting(self, key: ThreadKey) -> int:
        """How many requests of this thread wait for its lock."""
        found = self._turns.get(key)
        return found.waiting if found is not None else 0
