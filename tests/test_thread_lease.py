"""A thread's turn across instances (`proxy/server/thread_lease.py`): a lost lease cancels only
the work inside `stopped_on_loss`, and `in_turns` takes the turn once more after a loss."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, nullcontext
from typing import Any

import pytest

from proxy.records import ThreadKey
from proxy.server.compaction_errors import LeasePassed
from proxy.server.request_line import RequestLine
from proxy.server.thread_lease import LeaseWatch, in_turns, is_lease_lost, stopped_on_loss
from proxy.server.turns import Meanwhile, ThreadTurns

KEY = ThreadKey("tenant", "thread")


def _watch(last: bool = False) -> LeaseWatch:
    return LeaseWatch(asyncio.get_running_loop().create_future(), last)


async def test_a_loss_during_the_block_cancels_it_with_the_lease_message() -> None:
    lease = _watch()
    asyncio.get_running_loop().call_later(0.01, lease.lost.set_result, None)
    with pytest.raises(asyncio.CancelledError) as cancelled:
        with stopped_on_loss(lease):
            await asyncio.sleep(5)
    assert is_lease_lost(cancelled.value)


async def test_a_lease_lost_before_the_block_cancels_it_at_its_first_wait() -> None:
    lease = _watch()
    lease.lost.set_result(None)
    with pytest.raises(asyncio.CancelledError) as cancelled:
        with stopped_on_loss(lease):
            await asyncio.sleep(5)
    assert is_lease_lost(cancelled.value)


async def test_a_loss_after_the_block_reaches_nothing() -> None:
    lease = _watch()
    with stopped_on_loss(lease):
        await asyncio.sleep(0)
    lease.lost.set_result(None)
    await asyncio.sleep(0.01)  # what comes after (a checkpoint's write) is not cut
    assert not lease.lost.cancelled()


async def test_a_loss_whose_callback_was_already_scheduled_at_the_blocks_end_reaches_nothing(
        ) -> None:
    lease = _watch()
    with stopped_on_loss(lease):
        await asyncio.sleep(0)
        lease.lost.set_result(None)  # its callbacks are scheduled, not yet run
    await asyncio.sleep(0.01)


async def test_without_a_lease_nothing_is_watched() -> None:
    with stopped_on_loss(None):
        await asyncio.sleep(0)
    assert not is_lease_lost(asyncio.CancelledError())


class _Store:
    """A shared store's lease, by its yields: each turn gets a new future, kept here."""

    def __init__(self, lost: bool) -> None:
        self.lost = lost
        self.leases: list[asyncio.Future[None] | None] = []

    @asynccontextmanager
    async def compaction_lease(self, key: ThreadKey) -> AsyncIterator[asyncio.Future[None]]:
        lease = asyncio.get_running_loop().create_future()
        self.leases.append(lease)
        yield lease


async def test_a_turn_whose_lease_passed_is_taken_once_more_and_the_line_says_so() -> None:
    store, line, runs = _Store(lost=True), RequestLine(None), []

    async def run(meanwhile: Meanwhile, lease: LeaseWatch | None) -> str:
        runs.append(lease)
        assert lease is not None
        if not lease.last:
            raise LeasePassed("lost", lease.last)
        return "second"

    assert await in_turns(ThreadTurns(), store, KEY, line, run) == "second"  # type: ignore[arg-type]
    assert [lease.last for lease in runs if lease] == [False, True]
    assert line.fields["compaction_lease_lost"] == 1


async def test_a_store_without_a_lease_to_lose_runs_once_unwatched() -> None:
    class Local:
        def compaction_lease(self, key: ThreadKey) -> Any:
            return nullcontext()

    line, runs = RequestLine(None), []

    async def run(meanwhile: Meanwhile, lease: LeaseWatch | None) -> str:
        runs.append(lease)
        return "once"

    assert await in_turns(ThreadTurns(), Local(), KEY, line, run) == "once"  # type: ignore[arg-type]
    assert runs == [None] and "compaction_lease_lost" not in line.fields
