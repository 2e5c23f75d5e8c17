"""A write-through cache of thread states in front of a store, for the request path.

Loading a thread's state on every request would cost a round trip to the store's worker
thread; with this cache a known thread costs a dictionary lookup. Every write goes to the
store as before (queued or awaited, with the same guarantees) and updates the cached state in
the same step, so what the proxy reads next is what it wrote. That holds while one proxy process
owns the state, as the SQLite backend enforces. Over a `shared` store (Redis: other instances
write the same threads) it keeps no state across requests: `cached` finds nothing and `load`
reads the store every time, writes go through as they do here. `list_threads`, `find` and
`events` go to the store itself.

Activity is the exception to write-through: a thread's touch (last activity and estimate) is
persisted at most every `TOUCH_INTERVAL_S`. The latest touch held back is written with the
thread's next request once the interval has passed; every `TOUCH_INTERVAL_S` a task of the
open cache writes all the touches held back in one awaited transaction, so an idle thread's
last touch is on disk within that time (and a failed write keeps them held for the next);
`flush` and `close` write every held-back touch, so a clean stop leaves each thread's real
last activity and estimate on disk. A state read from the store carries the touches not yet
written (held back, or in the task's write in flight), so it is as recent as a cached one;
over a shared store another instance's newer touch stays: the newest touch by its time wins,
its activity and its estimate alike (`_touched`, and the Redis `TOUCH` script for what is
written late).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import replace
from typing import Any

from proxy.lru import LRU
from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState
from proxy.store.base import ANCHORS_KEPT, LeaseLoss, StateStore, ThreadSummary, Touch

DEFAULT_THREADS = 8192
# A thread's activity is written by its request at most this often (a touch per request would
# be most of the store's writes; the cache always has it exactly), and what that held back by a
# task this often. A kill loses only the touches and estimates of the last interval; the store
# reads a thread's newest anchor (each answer's is queued at once) as its last activity when
# later, so an idle time reads longer only by requests left unanswered.
TOUCH_INTERVAL_S = 30.0
HeldTouch = tuple[float, int | None]


class CachedStore:
    def __init__(self, store: StateStore, max_threads: int = DEFAULT_THREADS,
                 write_held_every_s: float = TOUCH_INTERVAL_S) -> None:
        self.store = store
        self.shared: bool = store.shared
        # A write updates the thread's state here only when it is cached
        # (`self._states.update`); an uncached one is read whole from the store when needed.
        self._states: LRU[ThreadKey, ThreadState] | _NothingKept = (
            _NothingKept() if self.shared else LRU(max_threads))
        self._touched: LRU[ThreadKey, float] = LRU(max_threads)  # when activity was persisted
        # The latest touch of each thread that the interval held back, oldest first; bounded:
        # past `max_threads` the oldest is written out, never dropped (one of a thread in the
        # task's write in flight once that write ends).
        self._held: OrderedDict[ThreadKey, HeldTouch] = OrderedDict()
        self._max_held = max_threads
        # The task's batch while its write is in flight, and the newer touches of its threads
        # that had to be written meanwhile (see `_write_out`): at most one per thread of it.
        self._in_flight: dict[ThreadKey, HeldTouch] = {}
        self._after_flight: dict[ThreadKey, HeldTouch] = {}
        self._write_held_every_s = write_held_every_s
        self._held_writer: asyncio.Task[None] | None = None
        # Held while the task's write is in flight: `flush` and `close` queue touches that
        # must reach the worker after it (see `_write_held_now`).
        self._writing = asyncio.Lock()
        # With retention (`proxy/store/retention.py`): the threads the request path read since
        # the current sweep began, and between the previous one's start and it. A request reads
        # its thread before anything else, and its touch is written only after its compaction,
        # and late: these keep a thread in use from being removed under it, a request that
        # outlasts a whole interval between sweeps aside. None: nothing swept, nothing noted.
        self._read: set[ThreadKey] | None = None
        self._read_before: set[ThreadKey] = set()

    async def open(self) -> None:
        await self.store.open()
        if self._held_writer is None:
            self._held_writer = asyncio.get_running_loop().create_task(
                self._write_held_periodically(), name="state-held-touches")

    async def close(self) -> None:
        async with self._writing:  # the task is asleep or waiting for the lock: nothing lost
            task, self._held_writer = self._held_writer, None
            if task is not None:
                task.cancel()
            self._write_held()
        if task is not None:
            await asyncio.wait([task])
        await self.store.close()

    async def flush(self) -> None:
        async with self._writing:
            self._write_held()
        await self.store.flush()

    async def written(self, key: ThreadKey) -> None:
        """The thread's queued writes, committed; not a touch held back (`TOUCH_INTERVAL_S`)."""
        await self.store.written(key)

    async def origin_written(self, made_id: str) -> None:
        await self.store.origin_written(made_id)

    def cached(self, key: ThreadKey) -> ThreadState | None:
        """The thread's state when this cache holds it (now the newest), else None: a known
        thread's state without a coroutine; `load` reads the others from the store."""
        if self._read is not None:
            self._read.add(key)
        return self._states.get(key)

    async def load(self, key: ThreadKey) -> ThreadState:
        if self._read is not None:
            self._read.add(key)
        found = self._states.get(key)
        if found is None:
            found = self._with_unwritten_touches(key, await self.store.load(key))
            self._states.put(key, found)
        return found

    def compaction_lease(self, key: ThreadKey) -> AbstractAsyncContextManager[LeaseLoss]:
        return self.store.compaction_lease(key)

    async def lease_check(self, key: ThreadKey) -> None:
        await self.store.lease_check(key)

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        held = self._held.pop(key, None)
        # `_merged`, inline for the usual case: a thread's requests come in order.
        if held is None or (at >= held[0] and estimate is not None):
            latest, latest_estimate = at, estimate
        else:
            latest, latest_estimate = _merged(held, at, estimate)
        persisted = self._touched.get(key)
        # A write in flight is rare: the emptiness test spares the due touch a key hash.
        if ((persisted is None or at - persisted >= TOUCH_INTERVAL_S)
                and (not self._in_flight or key not in self._in_flight)):
            self._persist(key, latest, latest_estimate)
        else:
            self._held[key] = (latest, latest_estimate)
            if len(self._held) > self._max_held:
                self._write_out(*_oldest(self._held))
        self._states.update(key, _touched, at, estimate)

    def add_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        self.store.add_anchor(key, anchor)
        self._states.update(key, _anchored, anchor)

    def keep_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        """`anchor` in the cached state alone, not written: one the thread can do without
        after a restart (`UsageRecorder._keeper`). Over a shared store, which caches nothing,
        it is written as `add_anchor` writes it: the store's copy is its only one."""
        if self.shared:
            self.add_anchor(key, anchor)
        else:
            self._states.update(key, _anchored, anchor)

    async def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        await self.store.add_origin(made_id, upstream, at)

    async def origin(self, made_id: str) -> str | None:
        return await self.store.origin(made_id)

    async def add_event(self, key: ThreadKey, event: CompactionEvent) -> CompactionEvent:
        stored = await self.store.add_event(key, event)
        self._states.update(key, lambda s: replace(s, event=stored, event_count=s.event_count + 1))
        return stored

    async def set_microcompact(self, key: ThreadKey, mark: MicrocompactMark) -> None:
        await self.store.set_microcompact(key, mark)
        self._states.update(key, lambda s: replace(s, microcompact=mark))

    async def list_threads(self, limit: int = 100) -> list[ThreadSummary]:
        return await self.store.list_threads(limit)

    async def find(self, thread_id: str) -> list[ThreadState]:
        return await self.store.find(thread_id)

    async def events(self, key: ThreadKey) -> list[CompactionEvent]:
        return await self.store.events(key)

    # -- retention ----------------------------------------------------------------------

    def sweep_begins(self) -> None:
        """A sweep starts: from now on reads are noted (none before the first), and those from
        before the previous sweep began are no longer."""
        self._read_before, self._read = self._read or set(), set()

    def claim_idle(self, keys: Sequence[ThreadKey]) -> list[ThreadKey]:
        """Those of `keys` (idle in the store) this process has not used lately, dropped from
        the cache: the caller removes them from the store at once, before any other task runs,
        so that a request that comes for one later reads it from the store after its removal
        and starts afresh. A thread read since the previous sweep began, or with a touch held
        back or being written, is in use and stays. Keys are the stored ones, which are the
        request path's own (`proxy.store.keys.storable_key` leaves those as they are)."""
        read = self._read or set()
        claimed = []
        for key in keys:
            if (key in read or key in self._read_before or key in self._held
                    or key in self._in_flight or key in self._after_flight):
                continue
            self._states.pop(key)
            self._touched.pop(key)
            claimed.append(key)
        return claimed

    def _with_unwritten_touches(self, key: ThreadKey, state: ThreadState) -> ThreadState:
        """`state` with this thread's touches that the store does not have yet, oldest first
        (a thread pushed out of the cache may still have one held back)."""
        for touches in (self._in_flight, self._after_flight, self._held):
            touch = touches.get(key)
            if touch is not None:
                state = _touched(state, *touch)
        return state

    def _persist(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self.store.record_request(key, at, estimate)
        self._touched.put(key, at)

    def _write_out(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        """Write a touch the bound pushed out; one of a thread in the task's batch in flight
        waits for the batch's end instead: queued now, the worker would drain it before the
        batch, whose older estimate would then stay."""
        if key in self._in_flight:
            self._after_flight[key] = _merged(self._after_flight.get(key), at, estimate)
        else:
            self._persist(key, at, estimate)

    def _write_held(self) -> None:
        held, self._held = self._held, OrderedDict()
        for key, (at, estimate) in held.items():
            self._persist(key, at, estimate)

    async def _write_held_periodically(self) -> None:
        while True:
            await asyncio.sleep(self._write_held_every_s)
            async with self._writing:
                await self._write_held_now()

    async def _write_held_now(self) -> None:
        """Every held-back touch in one awaited transaction; those of a write that fails are
        held again (under any newer touch) for the next. The store logs the failure."""
        if not self._held:
            return
        held, self._held = self._held, OrderedDict()
        touches: list[Touch] = []
        # Until the write ends, a newer touch of these threads is held, never queued: the worker
        # drains the queue before this write, which would then overwrite the newer estimate
        # with its older one (`record_request` and `_write_out` look in `_in_flight`).
        for key, (at, estimate) in held.items():
            touches.append((key, at, estimate))
            self._touched.put(key, at)
        self._in_flight = held
        try:
            await self.store.record_requests(touches)
        except BaseException as error:
            self._in_flight, after = {}, self._take_after_flight()
            self._hold_again(held, after)
            if not isinstance(error, Exception):
                raise  # cancelled: the touches are held again, for `close`
        else:
            self._in_flight = {}
            for key, (at, estimate) in self._take_after_flight().items():
                self._persist(key, at, estimate)  # queued after a committed batch: in order

    def _take_after_flight(self) -> dict[ThreadKey, HeldTouch]:
        after, self._after_flight = self._after_flight, {}
        return after

    def _hold_again(self, failed: OrderedDict[ThreadKey, HeldTouch],
                    after: dict[ThreadKey, HeldTouch]) -> None:
        """Hold the failed batch again, each touch under the newer ones of its thread: the one
        the bound pushed out meanwhile (`after` holds only threads of the batch), then the one
        held since."""
        newer, self._held = self._held, OrderedDict()
        for key, touch in failed.items():
            for later in (after.pop(key, None), newer.pop(key, None)):
                if later is not None:
                    touch = _merged(touch, *later)
            self._held[key] = touch
        self._held.update(newer)


class _NothingKept:
    """The cache of a shared store: another instance may write a thread at any time, so a
    state read for one request is not kept for the next."""

    def get(self, key: ThreadKey) -> None:
        return None

    def put(self, key: ThreadKey, state: ThreadState) -> None:
        return None

    def update(self, key: ThreadKey, change: Any, *args: object) -> None:
        return None

    def pop(self, key: ThreadKey) -> None:
        return None


def _merged(held: HeldTouch | None, at: float, estimate: int | None) -> HeldTouch:
    """A new touch over the one held back: the later time, the newest estimate given (a
    touch without one keeps the last known, as the store does)."""
    if held is None:
        return at, estimate
    return max(at, held[0]), estimate if estimate is not None else held[1]


def _oldest(held: OrderedDict[ThreadKey, HeldTouch]) -> tuple[ThreadKey, float, int | None]:
    key, (at, estimate) = held.popitem(last=False)
    return key, at, estimate


# The two updates every request makes: module functions and arguments, no closure each time.
# Each is `dataclasses.replace` without its walk over the fields (ThreadState has no
# `__post_init__`): the same new frozen state, its dict copied and changed in one update.
def _touched(state: ThreadState, at: float, estimate: int | None) -> ThreadState:
    """The newest touch by its time wins, the activity's and the estimate's alike: a held-back
    touch merged into a state read from a shared store may be older than another instance's."""
    if estimate is None or (state.estimate_at is not None and at < state.estimate_at):
        estimate, estimate_at = state.last_estimate, state.estimate_at
    else:
        estimate_at = at
    new = object.__new__(ThreadState)
    new.__dict__.update(
        state.__dict__, created_at=state.created_at if state.created_at is not None else at,
        last_activity=max(at, state.last_activity or at), last_estimate=estimate,
        estimate_at=estimate_at)
    return new


def _anchored(state: ThreadState, anchor: Anchor) -> ThreadState:
    new = object.__new__(ThreadState)
    new.__dict__.update(state.__dict__, anchors=(anchor, *state.anchors[:_OLDER_KEPT]))
    return new


_OLDER_KEPT = ANCHORS_KEPT - 1  # the anchors kept besides the newest
