"""The tracked background writer: non-critical writes off the request path, never lost.

The event loop only appends to a queue (`put`); the store's single worker thread applies
everything queued in one transaction (`drain`). The worker drains before every other job it
runs, so a read always sees the writes queued before it, and the store's `close` drains last.
A write that must not be lost (a checkpoint) does not come here: the caller awaits it.
A write that fails anyway (a full disk) is counted, and `on_failed` hears of it once per batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

Write = Callable[[], object]
ApplyBatch = Callable[[Sequence[Write]], None]
# Told once per drained batch that lost writes: how many, and the last error.
OnFailed = Callable[[int, Exception], None]


class BackgroundWriter:
    def __init__(self, apply: ApplyBatch, on_failed: OnFailed | None = None) -> None:
        self._apply = apply
        self._on_failed = on_failed
        self._queue: list[Write] = []
        self._scheduled = False
        # Held for a list append or swap only, never across I/O: the loop never waits on disk.
        self._lock = threading.Lock()
        self.applied = 0
        self.failed = 0
        self.last_error: str | None = None

    @property
    def pending(self) -> int:
        return len(self._queue)

    def put(self, write: Write) -> bool:
        """Queue a write; True when the caller must schedule a `drain` on the worker."""
        with self._lock:
            self._queue.append(write)
            first, self._scheduled = not self._scheduled, True
        return first

    def drain(self) -> int:
        """Worker thread only: apply every queued write; returns how many were taken."""
        with self._lock:
            batch, self._queue, self._scheduled = self._queue, [], False
        if batch:
            self._apply_all(batch)
        return len(batch)

    def _apply_all(self, batch: list[Write]) -> None:
        try:
            self._apply(batch)
            self.applied += len(batch)
        except Exception:
            # One bad write must not take its batch down with it: retry one by one.
            errors = [error for write in batch if (error := self._apply_one(write)) is not None]
            if errors and self._on_failed is not None:
                self._on_failed(len(errors), errors[-1])

    def _apply_one(self, write: Write) -> Exception | None:
        try:
            self._apply([write])
            self.applied += 1
            return None
        except Exception as exc:
            self.failed += 1
            self.last_error = repr(exc)
            return exc
