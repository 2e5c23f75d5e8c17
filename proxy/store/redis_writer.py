"""The Redis store's queued writes: sent in order, as one pipeline per batch, by one task.

`put` only appends to a list; a task of the event loop sends whatever is queued as one
pipeline at once (other instances must see an answer's anchor soon: nothing waits for
company), and what is queued while a pipeline is in flight goes as the next. One task at a
time, so batches reach Redis in the order their writes were queued. `settled` waits until
everything queued before it was answered: `flush`, `close` and listings call it.
`settled_for(tag, ...)` waits only for the batches holding a write `put` under one of those
tags (a thread's key, say): a request's read, an awaited write, or an answer's wait for its own
anchor does not wait for other threads' writes.
A batch that fails is told to `on_failed` (how many writes, the last error) and not retried.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

Command = tuple[Any, ...]  # the arguments of one Redis command
# Sends a batch; returns how many failed and the last error (None for none).
SendBatch = Callable[[Sequence[Command]], Awaitable[tuple[int, BaseException | None]]]
OnFailed = Callable[[int, BaseException], None]


class QueuedWrites:
    def __init__(self, send: SendBatch, on_failed: OnFailed) -> None:
        self._send = send
        self._on_failed = on_failed
        self._queue: list[Command] = []
        # The tags of the queued batch's writes and of the batch in flight: a read of one
        # waits for the batch that holds it (at most two, answered in order).
        self._queued_tags: set[str] = set()
        self._flying_tags: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        # Made when someone waits: done when the queued batch (next) or the one in flight is.
        self._queued_done: asyncio.Future[None] | None = None
        self._flying_done: asyncio.Future[None] | None = None
        self.sent = 0
        self.failed = 0

    @property
    def pending(self) -> int:
        return len(self._queue)

    def put(self, command: Command, tag: str) -> None:
        """Queue `command`; `settled_for(tag)` waits for it."""
        self._queue.append(command)
        self._queued_tags.add(tag)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(),
                                                                name="state-queued-writes")

    async def settled(self) -> None:
        """Wait until every write queued before this call was answered (or failed)."""
        if self._queue:
            await self._queued_answered()
        elif self._task is not None:
            await self._flying_answered()

    async def settled_for(self, *tags: str) -> None:
        """Wait until every write queued under any of `tags` before this call was answered."""
        if any(tag in self._queued_tags for tag in tags):
            await self._queued_answered()  # answered after the one in flight
        elif any(tag in self._flying_tags for tag in tags):
            await self._flying_answered()

    async def _queued_answered(self) -> None:
        if self._queued_done is None:
            self._queued_done = asyncio.get_running_loop().create_future()
        # Shielded: a waiter cancelled (its client left) must not cancel the others' future.
        await asyncio.shield(self._queued_done)

    async def _flying_answered(self) -> None:
        if self._flying_done is None:
            self._flying_done = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._flying_done)

    async def _run(self) -> None:
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                self._flying_tags, self._queued_tags = self._queued_tags, set()
                self._flying_done, self._queued_done = self._queued_done, None
                try:
                    await self._send_one(batch)
                finally:
                    self._flying_tags = set()
                    done, self._flying_done = self._flying_done, None
                    if done is not None and not done.done():
                        done.set_result(None)
        finally:
            self._task = None

    async def _send_one(self, batch: list[Command]) -> None:
        try:
            failed, error = await self._send(batch)
        except Exception as exc:  # noqa: BLE001 - the writes are lost, never the task
            failed, error = len(batch), exc
        self.sent += len(batch) - failed
        if failed and error is not None:
            self.failed += failed
            self._on_failed(failed, error)
