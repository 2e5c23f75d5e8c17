"""Work that outlives the client that asked for it: a compaction goes on when its request's
client goes away, and only the shutdown's cut stops it.

aiohttp cancels a handler whose client disconnects. The work runs as a task of its own that
the handler keeps waiting for, whatever cancellation comes: so the handler (tracked by the
drain, holding the thread's lock) ends only after the work, and the shutdown's grace and cut
apply to it as to any request in flight. `to_the_end` runs work that no cancellation stops
(a checkpoint's local writes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from proxy.server.drain import CUT, is_cut

T = TypeVar("T")


async def outlive_client(work: Coroutine[Any, Any, T], on_leave: Callable[[asyncio.Task[T]], None]
                         ) -> tuple[asyncio.Task[T], bool, bool]:
    """Run `work` to its end; returns its finished task, whether the client left meanwhile
    (`on_leave` is called when it does) and whether the shutdown's cut came. The cut cancels
    `work`; the caller raises it (`is_cut`) once `work` has ended, unless the client had left:
    its request ends as a client's anyway."""
    task = asyncio.ensure_future(work)
    left = False
    cut: asyncio.CancelledError | None = None
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError as exc:
            if is_cut(exc):
                cut = exc
                task.cancel(CUT)
            elif not left:
                left = True
                on_leave(task)
    return task, left, cut is not None


async def to_the_end(work: Coroutine[Any, Any, T]) -> tuple[asyncio.Future[T], bool]:
    """Run `work` to its end even when the caller is cancelled meanwhile; returns the finished
    future and whether a cancellation came. For the local writes of a checkpoint: a cancelled
    await would not stop them (they run on worker threads), it would only lose their outcome."""
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.wait([task])
        except asyncio.CancelledError:
            cancelled = True
    return task, cancelled
