"""A thread's turn at compaction, and what a lost lease does to the compaction in it.

The turn is this process's lock for the thread, then the store's lease, which another proxy
instance on a shared store (Redis) may hold for the same thread. A holder that stalls past the
lease loses it to the next instance (`proxy/store/redis_lease.py`); the store says so
(`LeaseLoss`), and the loss cancels the compaction's summarizer call (`stopped_on_loss`),
since its checkpoint would be refused. The compactor then ends it with `LeasePassed`, and the
request takes its turn once more (`in_turns`): that waits for the new holder, and the state it
reads then holds the checkpoint the new holder wrote, if it wrote one. A store with no lease
to lose (SQLite) yields None: nothing is watched, nothing changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

from proxy.records import ThreadKey
from proxy.server.compaction_errors import LeasePassed
from proxy.server.request_line import RequestLine
from proxy.server.turns import Meanwhile, ThreadTurns
from proxy.store import StateStore

T = TypeVar("T")
LEASE_LOST = "compaction-proxy: the thread's compaction lease passed to another instance"


@dataclass(frozen=True)
class LeaseWatch:
    lost: asyncio.Future[None]  # done once another holder took the lease
    last: bool  # the request's last turn: a loss now degrades it


Turn = tuple[Meanwhile, LeaseWatch | None]


@asynccontextmanager
async def turn(turns: ThreadTurns, store: StateStore, key: ThreadKey,
               last: bool) -> AsyncIterator[Turn]:
    """The thread's turn: the failures of the compactions that ended while it waited, and the
    watch of its lease (None: the store has none to lose). The state is read after both are
    held: a checkpoint the holder before wrote is then seen."""
    async with turns.of(key).take() as meanwhile:
        async with store.compaction_lease(key) as lost:
            yield meanwhile, None if lost is None else LeaseWatch(lost, last)


async def in_turns(turns: ThreadTurns, store: StateStore, key: ThreadKey, line: RequestLine,
                   run: Callable[[Meanwhile, LeaseWatch | None], Awaitable[T]]) -> T:
    """`run` in the thread's turn; once more in a new one when the lease passed to another
    instance under it (`compaction_lease_lost` on the line). `run` handles a loss in the
    second turn itself (`LeasePassed.last`)."""
    try:
        async with turn(turns, store, key, last=False) as (meanwhile, lease):
            return await run(meanwhile, lease)
    except LeasePassed:
        line.set(compaction_lease_lost=1)
    async with turn(turns, store, key, last=True) as (meanwhile, lease):
        return await run(meanwhile, lease)


@contextmanager
def stopped_on_loss(lease: LeaseWatch | None) -> Iterator[None]:
    """Cancel the current task with `LEASE_LOST` when the lease is lost during the block (or
    was already); a loss after the block does not reach it."""
    task = None if lease is None else asyncio.current_task()
    if lease is None or task is None:
        yield
        return
    armed = True

    def stop(_: asyncio.Future[None]) -> None:
        if armed:  # the callback may run after the block, already scheduled
            task.cancel(LEASE_LOST)

    lease.lost.add_done_callback(stop)
    try:
        yield
    finally:
        armed = False
        lease.lost.remove_done_callback(stop)


def is_lease_lost(exc: BaseException) -> bool:
    """True for the cancellation `stopped_on_loss` sends."""
    return isinstance(exc, asyncio.CancelledError) and exc.args == (LEASE_LOST,)
