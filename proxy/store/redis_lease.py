"""A thread's compaction lease on Redis: one proxy instance at a time compacts a thread.

Taken with `SET key token NX PX lease`, the token random to this holder; renewed every third
of the lease while the holder runs, and released by a script that deletes the key only when
it still holds this token (a holder that outlived its lease never frees another's). A holder
whose process dies frees it when the lease runs out. A waiter polls, backing off from 20 ms
to 200 ms: a compaction takes seconds, and a waiter wants to start soon after it ends.

A renewal that finds the lease taken (the holder stalled longer than the lease) logs
`compaction_lease_lost` and sets the holder's `lost` future, which stops its compaction; its
checkpoint would be refused anyway (`LeaseLost`: the store's checkpoint script compares the
holder's token with the lease's), since the new holder may have cut the history back and
offloaded lines of its own meanwhile.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import redis.asyncio

from proxy.store.redis_connection import SERVER_ERRORS
from proxy.store.redis_scripts import RELEASE_LEASE, RENEW_LEASE

FIRST_WAIT_S = 0.02
LONGEST_WAIT_S = 0.2
RunScript = Callable[..., Any]  # `RedisStore._script`: (script, keys, args) -> its answer


@dataclass(frozen=True)
class Held:
    token: str
    lost: asyncio.Future[None]  # done once a renewal found the lease another's


@asynccontextmanager
async def held_lease(client: redis.asyncio.Redis, name: str, lease_s: float,
                     run_script: RunScript, log: Any,
                     unavailable: Callable[[BaseException], Exception],
                     who: dict[str, Any] | None = None) -> AsyncIterator[Held]:
    """Hold the lease `name` for the body, which gets the holder's token and what says when
    the lease was lost; waits while another holds it. `unavailable` makes the error raised
    when Redis cannot be asked; `who` (thread and tenant) goes on the lease's log lines, as
    on the compaction's own."""
    who = who or {}
    token = secrets.token_hex(16)
    lease_ms = max(1, int(lease_s * 1000))
    await _acquire(client, name, token, lease_ms, unavailable)
    loop = asyncio.get_running_loop()
    held = Held(token, loop.create_future())
    # Its cancel alone may not stop the renewal: one that lands while redis-py's command is
    # in flight can come back as that command's error, which the loop outlives.
    stopping = asyncio.Event()
    renewing = loop.create_task(
        _renew(name, held, lease_ms, run_script, log, stopping, who), name="compaction-lease")
    try:
        yield held
    finally:
        stopping.set()
        renewing.cancel()
        await asyncio.wait([renewing])
        await _release(name, token, run_script, log, who, lease_s)


async def _acquire(client: redis.asyncio.Redis, name: str, token: str, lease_ms: int,
                   unavailable: Callable[[BaseException], Exception]) -> None:
    wait_s = FIRST_WAIT_S
    while True:
        try:
            if await client.set(name, token, nx=True, px=lease_ms):
                return
        except SERVER_ERRORS as error:
            raise unavailable(error) from None
        await asyncio.sleep(wait_s)
        wait_s = min(wait_s * 2, LONGEST_WAIT_S)


async def _renew(name: str, held: Held, lease_ms: int, run_script: RunScript,
                 log: Any, stopping: asyncio.Event, who: dict[str, Any]) -> None:
    every_s = lease_ms / 3000
    while not stopping.is_set():
        await asyncio.sleep(every_s)
        try:
            renewed = await run_script(RENEW_LEASE, (name,), (held.token, lease_ms))
        except SERVER_ERRORS as error:  # tried again next time; the lease may still hold
            if not stopping.is_set():
                log.warning("compaction_lease_renewal_failed", **who,
                            error=type(error).__name__)
            continue
        if not renewed:
            log.warning("compaction_lease_lost", **who, lease_s=lease_ms / 1000)
            if not stopping.is_set() and not held.lost.done():
                held.lost.set_result(None)
            return


async def _release(name: str, token: str, run_script: RunScript, log: Any,
                   who: dict[str, Any], lease_s: float) -> None:
    try:
        await run_script(RELEASE_LEASE, (name,), (token,))
    except SERVER_ERRORS as error:  # the body's outcome stands; the lease is let go later
        log.warning("compaction_lease_release_failed", **who, error=type(error).__name__)
        retry = asyncio.get_running_loop().create_task(
            _release_later(name, token, run_script, lease_s), name="compaction-lease-release")
        _RELEASING.add(retry)
        retry.add_done_callback(_RELEASING.discard)


# Releases tried again in the background, held here so that they are not collected mid-way.
_RELEASING: set[asyncio.Task[None]] = set()
RELEASE_RETRY_FIRST_S = 0.25


async def _release_later(name: str, token: str, run_script: RunScript, lease_s: float) -> None:
    """A release Redis refused (a stall, a restart), tried again while the lease would still
    stand: the thread's next compaction, on this instance or another, would otherwise wait out
    what is left of it (30 s by default) for a holder that is long done."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + lease_s
    wait_s = RELEASE_RETRY_FIRST_S
    while loop.time() + wait_s < deadline:
        await asyncio.sleep(wait_s)
        try:
            await run_script(RELEASE_LEASE, (name,), (token,))
            return
        except SERVER_ERRORS:
            wait_s = min(wait_s * 2, 2.0)

