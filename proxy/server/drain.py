"""Graceful shutdown: in-flight requests get `server.shutdown_grace_s` in all, then are cut.

Every handler's task is tracked until its response is written. On shutdown (aiohttp has
closed the listening sockets and idle connections by then) the drain waits for those tasks; the
ones still running when the grace ends are cancelled with the `CUT` message. A relayed stream
takes the cut as its end and closes with the API's error frame; a request that has sent nothing
yet is answered 503 `proxy_shutting_down`. The application's cleanup then waits (briefly) for
every handler to end before it closes the state store, so no write is cut in half. A second
SIGINT or SIGTERM during the grace (`hurry`: an operator who will not wait) ends it at once:
the requests are cut as at its end, and the store still closes cleanly.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

CUT = "compaction-proxy: shutdown grace ended"
HURRIED = "compaction-proxy: shutdown hurried by a second signal"
CUT_MESSAGE = "The proxy is shutting down and cut this request off; retry it."
# After the cut, handlers only write their last frame and record usage: this is plenty.
CUT_WAIT_S = 2.0


def is_cut(exc: BaseException | None) -> bool:
    """True for the cancellation the drain sends when the grace ends (not a client leaving)."""
    return isinstance(exc, asyncio.CancelledError) and exc.args in ((CUT,), (HURRIED,))


def cut_reason(exc: BaseException) -> str:
    """Why the drain cut a request, in the words of its log line."""
    if isinstance(exc, asyncio.CancelledError) and exc.args == (HURRIED,):
        return "cut by shutdown: a second signal hurried it"
    return "cut by shutdown: server.shutdown_grace_s ended"


def resume_after_cut() -> None:
    """Take the cut's cancellation back: the handler answers, and its later awaits run."""
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


class Drain:
    """The handlers in flight, and the shutdown step that waits for them, then cuts them."""

    def __init__(self, grace_s: float, log: Any) -> None:
        self.grace_s = grace_s
        self._log = log
        self._tasks: set[asyncio.Task[Any]] = set()
        self._forget = self._tasks.discard  # bound once: every request's task ends with it
        self._hurried = asyncio.Event()
        # Set as the shutdown begins (`runner._Server.pre_shutdown`): an answer then ends its
        # connection, which aiohttp would otherwise keep reading requests from.
        self.stopping = False

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def track(self, task: asyncio.Task[Any] | None) -> None:
        """Track a handler's task until it ends, i.e. after aiohttp wrote the end of its
        response (`proxy.server.serving` calls this as the handler starts, and answers the cut)."""
        tasks = self._tasks
        if task is not None and task not in tasks:
            tasks.add(task)
            task.add_done_callback(self._forget)

    async def on_shutdown(self, app: web.Application) -> None:
        if not self._tasks:
            return
        self._log.info("draining", requests=len(self._tasks), grace_s=self.grace_s)
        if await self.settle(self.grace_s, self._hurried):
            return
        self._log.warning("requests_cut", requests=len(self._tasks))
        cut = HURRIED if self._hurried.is_set() else CUT
        for task in list(self._tasks):
            task.cancel(cut)
        await self.settle(CUT_WAIT_S)

    def hurry(self) -> None:
        """End the grace now (a second signal): what is still running is cut."""
        if not self._hurried.is_set():
            self._log.warning("shutdown_hurried", requests=len(self._tasks))
            self._hurried.set()

    async def settle(self, timeout: float, hurried: asyncio.Event | None = None) -> bool:
        """Wait up to `timeout` for every tracked handler to end, or until `hurried` is set;
        True when none is left.

        The set is read again after each wait: a request parsed just before the sockets
        closed may start its handler while the drain already waits."""
        deadline = time.monotonic() + timeout
        hurry = None if hurried is None else asyncio.ensure_future(hurried.wait())
        try:
            while self._tasks:
                left = deadline - time.monotonic()
                if left <= 0 or (hurry is not None and hurry.done()):
                    return False
                if hurry is None:
                    await asyncio.wait(set(self._tasks), timeout=left)
                else:  # woken by the first handler to end, or by the hurry
                    await asyncio.wait({*self._tasks, hurry}, timeout=left,
                                       return_when=asyncio.FIRST_COMPLETED)
            return True
        finally:
            if hurry is not None:
                hurry.cancel()
