"""The state store interface the rest of the proxy uses; the core never touches SQL.

A store keeps, per (tenant digest, thread id), the records of `proxy/records.py`. Thread ids
are normalized by `proxy.store.keys.thread_key_text` (the server calls it; every store calls
it again, it is idempotent), so any str is a valid key.

Write guarantees every implementation gives:
- `add_event` and `set_microcompact` are awaited: when they return, the write is committed.
  `add_event` is atomic: a crash leaves the old latest event or the new one, never half.
- `record_request`, `add_anchor` and `add_origin` are queued (the request path does not wait
  on disk) and applied in order; a later `load` (or `origin`) on the same store sees them;
  `flush` and `close` wait for them, `written` for a thread's, `origin_written` for an id's.
  `record_request` and `add_anchor` are plain calls, not coroutines: every request makes them,
  and a coroutine that never waits costs its creation and its await for nothing.

A store is `shared` when other processes write the same state (Redis: several proxy
instances); then nothing may be cached across requests, and a thread is compacted under its
`compaction_lease`, which one holder at a time has across all of them. A store that is not
shared (SQLite: one process owns the directory) hands out a lease that does nothing: the
server's own per-thread lock already keeps its compactions apart, and there is no lease to
lose. A shared store's lease says when it was lost (its holder stalled past it and another
took it over), so that the compaction under it stops.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState

ANCHORS_KEPT = 16
REDIS_MISSING = ("state.backend redis needs the redis package: "
                 "pip install 'compaction-proxy[redis]'")
Touch = tuple[ThreadKey, float, int | None]  # a `record_request`'s arguments


class StoreError(Exception):
    """The store cannot serve: not open, closed, its directory owned by another process, a
    database newer than this code, or a damaged one (`proxy.store.damage`)."""

    # A checkpoint refused with it may have been written all the same (its answer lost), or
    # its history lines may be another writer's by now: the compactor leaves them in the list
    # for the next compaction to account for or cut off, never takes them back itself.
    keeps_history_lines = False


class LeaseLost(StoreError):
    """A checkpoint refused, or refused in advance (`lease_check`): its compaction outlived
    the thread's lease, which another instance holds now or has written under since."""

    keeps_history_lines = True  # the new holder has cut them off and may have offloaded its own

    def __init__(self) -> None:
        super().__init__("the thread's compaction lease passed to another proxy instance "
                         "before this checkpoint was written (state.redis.lease_s)")


# What a store's `compaction_lease` yields: a future done once the lease is lost (another holder
# took it), or None where there is no lease to lose (a local lock).
LeaseLoss: TypeAlias = asyncio.Future[None] | None


@dataclass(frozen=True)
class ThreadSummary:
    """One line of `compaction-proxy threads`."""

    thread: str
    tenant: str
    created_at: float
    last_activity: float
    event_count: int
    last_estimate: int | None


@dataclass(frozen=True)
class Removed:
    """What retention freed: threads (their rows), history files and those files' bytes."""

    threads: int = 0
    files: int = 0
    bytes: int = 0

    def __add__(self, other: Removed) -> Removed:
        return Removed(self.threads + other.threads, self.files + other.files,
                       self.bytes + other.bytes)


@runtime_checkable
class IdleRemoval(Protocol):
    """A store that retention sweeps (SQLite); Redis expires a thread's keys instead."""

    async def idle_threads(self, before: float, after: ThreadKey | None,
                           limit: int) -> list[ThreadKey]:
        """Up to `limit` threads with no activity since `before`, in key order after `after`."""

    async def remove_threads(self, keys: Sequence[ThreadKey], before: float) -> Removed:
        """Remove whole those of `keys` still idle since `before`, crash-safe."""


class StateStore(Protocol):
    shared: bool  # other processes write this state too: cache nothing across requests

    async def open(self) -> None:
        """Create or migrate the storage; must be awaited before any other call."""

    async def close(self) -> None:
        """Apply queued writes, then release connections. Idempotent."""

    async def flush(self) -> None:
        """Wait until every queued write is committed."""

    async def written(self, key: ThreadKey) -> None:
        """Wait until the thread's writes queued before this call are committed (or failed);
        a shared store does not wait for other threads'."""

    async def origin_written(self, made_id: str) -> None:
        """Wait until `add_origin`'s writes of `made_id` queued before this call are committed
        (or failed); a shared store does not wait for other ids'."""

    async def load(self, key: ThreadKey) -> ThreadState:
        """The thread's state; an empty one (`known` False) for an unknown thread."""

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        """Queue: touch last activity (creating the thread), keep the estimate if given."""

    async def record_requests(self, touches: Sequence[Touch]) -> None:
        """Commit these touches (as `record_request` each, in order) in one transaction, after
        the writes queued before; raises, having logged it, when the transaction fails."""

    def add_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        """Queue: add a usage anchor; only the latest `ANCHORS_KEPT` are kept."""

    async def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        """Queue: the name of the upstream that made a stored answer (`proxy/server/origins.py`);
        those older than the upstream keeps them go."""

    async def origin(self, made_id: str) -> str | None:
        """The upstream name `add_origin` gave `made_id`, or None."""

    async def add_event(self, key: ThreadKey, event: CompactionEvent) -> CompactionEvent:
        """Commit a checkpoint atomically; returns it with its `seq` assigned (1, 2, ...)."""

    async def set_microcompact(self, key: ThreadKey, mark: MicrocompactMark) -> None:
        """Commit how far microcompaction reached."""

    async def list_threads(self, limit: int = 100) -> list[ThreadSummary]:
        """The most recently active threads first."""

    async def find(self, thread_id: str) -> list[ThreadState]:
        """Every tenant's state for one thread id (for the `inspect` CLI)."""

    async def events(self, key: ThreadKey) -> list[CompactionEvent]:
        """All checkpoints of a thread, oldest first."""

    def compaction_lease(self, key: ThreadKey) -> AbstractAsyncContextManager[LeaseLoss]:
        """Held while the thread is compacted: entering waits while another holder (another
        instance, for a shared store) has it. It outlives a holder that died by a bounded time
        only (`state.redis.lease_s`); it yields what says when it was lost (`LeaseLoss`)."""

    async def lease_check(self, key: ThreadKey) -> None:
        """Raise `StoreError` when this holder's `compaction_lease` of the thread is no longer
        its own (it stalled past the lease, and another may have written since): asked before
        the thread's history is touched. Nothing to check where the lease is a local lock."""
