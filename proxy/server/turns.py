"""One compaction per thread at a time, and what the requests that waited for it learn.

Requests on one thread (an agent's retry, two tabs) take turns at its compaction: each holds
the thread's lock while it compacts. A request that waited reuses the checkpoint the one before
it wrote (the flow reads the store for that); when that one failed instead, the request that
waited shares the failure rather than repeating it at once:

- a failure of the summarizer's side (the summary, the checkpoint's write) whatever the
  request: a summarizer that just timed out would make each request in the queue wait out its
  timeout again, and a single thread's burst would count as several failures towards the
  breaker every thread shares; one that refused or rate-limited the request's own credential
  (`client_owned`) is shared as the client's own error: the thread's key names the credential;
- a failed post-check, and a refusal decided by the compaction's inputs (a plan, or a re-plan
  for the summarizer's real window, over `max_calls`; content the summarizer's upstream
  refused by its content policy; recorded at stage `summarize`), only by a request that
  would give its compaction the same inputs (same checkpoint base, same messages, same model
  and thresholds, `Job.inputs`): an agent's retry of the very request. Another tab's, or one
  with another model, differs, and its own compaction may pass.

A checkpoint written since clears them: the summarizer works, and a request that still needs
a summary on that checkpoint asks for its own. A thread's turns live only while a request holds or waits for them (weakly kept): a failure
nobody waited for is forgotten, and the next request tries again, as the breaker allows.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from proxy.compaction.postcheck import Verdict
from proxy.records import ThreadKey
from proxy.server.client_owned import Refusal

# The failures of the summarizer's side, which the breaker counts; a post-check failure belongs
# to its request's content, and so does a `summarize` failure its inputs decide
# (`SharedFailure.by_inputs`). A cancellation (the shutdown's) is shared by no one.
SUMMARIZER_STAGES = ("summarize", "checkpoint")
POST_CHECK = "post_check"
# Failures of distinct inputs a thread's turn keeps for its waiters (besides the summarizer's
# latest): of a queue of requests that all differ and all fail, the latest; the waiter of an
# older one runs its own compaction.
KEPT_FAILURES = 8


@dataclass(frozen=True)
class SharedFailure:
    stage: str
    reason: str
    inputs: object = None  # what the failed compaction was given (`Job.inputs`)
    verdict: Verdict | None = None  # a failed post-check's, for the client's error
    by_inputs: bool = False  # decided by `inputs` (`CompactionFailed.by_inputs`)
    # The request's own credential refused or rate-limited: the thread's key names the
    # credential (its tenant), so every request waiting on it presented the same one.
    refusal: Refusal | None = None

    @property
    def of_inputs(self) -> bool:
        """Whether the failure belongs to what the compaction was given, not to the
        summarizer: a failed post-check, or a `summarize` failure its inputs decide."""
        return self.stage == POST_CHECK or self.by_inputs

    def concerns(self, inputs: object) -> bool:
        """Whether a compaction given `inputs` would end as this one did."""
        if self.of_inputs:
            return self.inputs == inputs
        return self.stage in SUMMARIZER_STAGES


@dataclass(frozen=True)
class Meanwhile:
    """The failures of the compactions that ended while a request waited, latest first."""

    failures: tuple[SharedFailure, ...] = ()

    def shared(self, inputs: object, summarizer: bool = True) -> SharedFailure | None:
        """The latest failure a compaction given `inputs` would repeat; `summarizer`: one
        of the summarizer's side may be it."""
        return next((f for f in self.failures if f.concerns(inputs)
                     and (summarizer or f.of_inputs)), None)


class ThreadTurn:
    """A thread's compaction lock, and the failures of the compactions run under it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.failures = 0  # how many have failed so far: a waiter notes it before it waits
        # The latest summarizer failure and the latest failure of each inputs, numbered, oldest
        # first: one must not hide from a waiter another that concerns it (a post-check's the
        # summarizer's before it, another request's refusal an agent's retry's post-check).
        self._latest: list[tuple[int, SharedFailure]] = []
        self.waiting = 0  # requests waiting for the lock

    @asynccontextmanager
    async def take(self) -> AsyncIterator[Meanwhile]:
        """Hold the thread's lock; yields the failures of the compactions that ended while
        this request waited for it."""
        seen = self.failures
        self.waiting += 1
        try:
            await self.lock.acquire()
        finally:
            self.waiting -= 1
        try:
            yield self.failures_since(seen)
        finally:
            self.lock.release()

    def failed(self, failure: SharedFailure) -> None:
        if failure.stage in SUMMARIZER_STAGES or failure.stage == POST_CHECK:
            self.failures += 1
            kept = [(n, f) for n, f in self._latest if not _supersedes(failure, f)]
            kept.append((self.failures, failure))
            by_inputs = [numbered for numbered in kept if numbered[1].of_inputs]
            if len(by_inputs) > KEPT_FAILURES:
                kept.remove(by_inputs[0])
            self._latest = kept

    def succeeded(self) -> None:
        """A checkpoint was written: the summarizer works, and the failures before it are
        no one's to share (a waiter that still needs a summary on it asks for its own)."""
        self._latest.clear()

    def failures_since(self, seen: int) -> Meanwhile:
        """The failures that came after `seen` (the count when the request began to wait)."""
        return Meanwhile(tuple(f for number, f in reversed(self._latest) if number > seen))


def _supersedes(later: SharedFailure, earlier: SharedFailure) -> bool:
    """Whether `later` concerns every compaction `earlier` does: the same kind, the same inputs."""
    if later.of_inputs != earlier.of_inputs:
        return False
    return not later.of_inputs or later.inputs == earlier.inputs


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
