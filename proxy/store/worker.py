"""The store's one worker thread: it runs the jobs given to it one at a time, in order.

A thread of its own, not a one-worker `ThreadPoolExecutor`: the store wakes its worker for
every batch of queued writes, and an executor's `submit` builds a future, with its condition
and lock, and settles it each time (some 800 Python steps a batch, a few batches a second on a
busy proxy, one per request or two on a quiet one). `post` is one put on a queue built in C.
The calls the event loop awaits still get a future (`submit`).

As an executor's threads are, a worker still running when the interpreter exits is let finish
the jobs given to it first (jobs posted later are not run).
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any, TypeVar

T = TypeVar("T")
Job = Callable[[], object]


class Worker:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[Job | None] = queue.SimpleQueue()
        # Without the exit hook below nothing would end a non-daemon worker at exit: the
        # interpreter would wait for it forever (the store's close drains it in any case).
        self._thread = threading.Thread(target=_work, args=(self._jobs,), name=name,
                                        daemon=_REGISTER_AT_EXIT is None)
        self._thread.start()
        _LIVE[self._thread] = self._jobs

    def post(self, job: Job) -> None:
        """Run `job` after every job given before it. Nothing waits for it, and what it raises
        is dropped: a posted job reports its own failures (`BackgroundWriter` counts them)."""
        self._jobs.put(job)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        """Run `fn(*args, **kwargs)` after every job given before it; its result or error in
        the future returned."""
        future: Future[T] = Future()
        self._jobs.put(partial(_settle, future, fn, args, kwargs))
        return future

    def shutdown(self) -> None:
        """End the thread once the jobs already given have run; later ones never run."""
        self._jobs.put(None)


def _work(jobs: queue.SimpleQueue[Job | None]) -> None:
    while (job := jobs.get()) is not None:
        try:
            job()
        except BaseException:  # noqa: BLE001 - a posted job's own business, as in an executor
            pass
        del job  # not kept alive while the thread waits for the next


def _settle(future: Future[T], fn: Callable[..., T], args: tuple[Any, ...],
            kwargs: dict[str, Any]) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001 - the awaiting caller gets it
        future.set_exception(error)
    else:
        future.set_result(result)


# The workers alive, by thread: at the interpreter's exit each finishes what it was given
# (`threading._register_atexit` runs before the non-daemon threads are joined; the standard
# library's executors stop their threads the same way).
_LIVE: weakref.WeakKeyDictionary[threading.Thread, queue.SimpleQueue[Job | None]] = (
    weakref.WeakKeyDictionary())


def _at_exit() -> None:
    live = list(_LIVE.items())
    for _, jobs in live:
        jobs.put(None)
    for thread, _ in live:
        thread.join()


# A private hook of `threading` (3.9+); should a later Python drop it, workers are daemons.
_REGISTER_AT_EXIT = getattr(threading, "_register_atexit", None)
if _REGISTER_AT_EXIT is not None:
    _REGISTER_AT_EXIT(_at_exit)
