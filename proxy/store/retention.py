"""Retention (`state.retention_days`) on a store that keeps threads until removed: the sweep.

A thread with no request for longer than the retention is removed whole, rows and history
file (`proxy/store/sqlite_sweep.py`), at start and then every `SWEEP_EVERY_S`, in batches of
`SWEEP_BATCH` threads: each batch is one job of the store's worker, one transaction, so the
requests' own jobs run between them and a big first sweep never holds the database long. A
thread this process has used lately stays (`CachedStore.claim_idle`): its activity is written
late, and a request that compacts writes it only at the end. Redis needs none of this: a
thread's keys expire by themselves (`proxy/store/redis_scripts.py`).

Each sweep that removed anything, or kept a thread in use, logs `state_swept` with counts
(never an id or a thread's content); one that fails logs `state_sweep_failed` and the next
tries again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from proxy.store.base import IdleRemoval, Removed
from proxy.store.cached import CachedStore
from proxy.store.failures import describe

SWEEP_EVERY_S = 3600.0
SWEEP_BATCH = 500  # threads a transaction: some 16k rows at most, a few ms


class Sweeper:
    def __init__(self, cache: CachedStore, store: IdleRemoval, retention_s: float,
                 log: Any = None, *, clock: Callable[[], float] = time.time,
                 every_s: float = SWEEP_EVERY_S, batch: int = SWEEP_BATCH) -> None:
        """`store` is the one behind `cache` (its removals must go through the cache's claim)."""
        self.cache = cache
        self.store = store
        self.retention_s = retention_s
        self.log = log if log is not None else structlog.get_logger("proxy")
        self.clock = clock
        self.every_s = every_s
        self.batch = batch
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Sweep now, then every `every_s`, until `stop`."""
        if self._task is None:
            self.cache.sweep_begins()  # reads from now on count as use
            self._task = asyncio.get_running_loop().create_task(self._run(), name="state-sweep")

    async def stop(self) -> None:
        """Cancel the sweeps; a batch the worker has begun is finished whole."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.wait([task])

    async def sweep(self, now: float) -> Removed:
        """Remove every thread idle since `now - retention` that is not in use; what it freed."""
        before = now - self.retention_s
        self.cache.sweep_begins()
        started = time.monotonic()
        freed, kept, after = Removed(), 0, None
        while True:
            idle = await self.store.idle_threads(before, after, self.batch)
            if not idle:
                break
            after = idle[-1]
            claimed = self.cache.claim_idle(idle)
            kept += len(idle) - len(claimed)
            if claimed:
                # Awaited at once: the removal is queued on the worker in this very step, ahead
                # of any read of these threads a request could queue after their eviction.
                freed += await self.store.remove_threads(claimed, before)
            if len(idle) < self.batch:
                break
        if freed.threads or freed.files or kept:
            self.log.info("state_swept", threads=freed.threads, files=freed.files,
                          bytes=freed.bytes, kept_in_use=kept,
                          retention_days=self.retention_s / 86_400.0,
                          took_ms=round((time.monotonic() - started) * 1000, 1))
        return freed

    async def _run(self) -> None:
        while True:
            try:
                await self.sweep(self.clock())
            except Exception as error:  # noqa: BLE001 - the next sweep tries again
                self.log.warning("state_sweep_failed", **describe(error))
            await asyncio.sleep(self.every_s)


def sweeper_for(cache: CachedStore, retention_s: float, log: Any = None,
                clock: Callable[[], float] = time.time) -> Sweeper | None:
    """The sweep of the store behind `cache` when it keeps threads until removed (SQLite);
    None with no retention, or on Redis, where a thread's keys expire by themselves."""
    if retention_s <= 0 or not isinstance(cache.store, IdleRemoval):
        return None
    return Sweeper(cache, cache.store, retention_s, log, clock=clock)
