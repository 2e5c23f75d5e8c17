"""The store's worker thread: jobs run one at a time in the order given, off the caller's
thread; awaited jobs get a future, and the batches of queued writes are woken without one."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from proxy.records import Anchor, ThreadKey
from proxy.store import SqliteStore
from proxy.store.worker import Worker

KEY = ThreadKey("tenant-a", "thread-1")


def test_jobs_run_in_order_on_the_workers_own_thread() -> None:
    worker = Worker("test-worker")
    ran: list[tuple[int, str]] = []
    try:
        for n in range(50):
            worker.post(lambda n=n: ran.append((n, threading.current_thread().name)))
        assert worker.submit(lambda a, b=0: a + b, 40, b=2).result(10) == 42
        assert [n for n, _ in ran] == list(range(50))
        assert {name for _, name in ran} == {"test-worker"}
    finally:
        worker.shutdown()


def test_a_submitted_job_raises_through_its_future_and_a_posted_one_is_dropped() -> None:
    worker = Worker("test-worker")
    try:
        worker.post(lambda: 1 / 0)  # the worker goes on
        failed = worker.submit(lambda: [][1])
        with pytest.raises(IndexError):
            failed.result(10)
        assert worker.submit(str, 7).result(10) == "7"
    finally:
        worker.shutdown()


def test_shutdown_ends_the_thread_after_the_jobs_given_before() -> None:
    worker = Worker("test-worker")
    release, ran = threading.Event(), []
    worker.post(lambda: release.wait(10))
    worker.post(lambda: ran.append(1))
    worker.shutdown()
    worker.post(lambda: ran.append(2))  # given after: never run
    release.set()
    worker._thread.join(10)
    assert not worker._thread.is_alive() and ran == [1]


async def test_queued_writes_are_written_without_a_future(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    store = SqliteStore(tmp_path, write_delay_s=0.001)
    await store.open()
    made: list[Future[Any]] = []
    init = Future.__init__

    def counted(self: Future[Any]) -> None:
        made.append(self)
        init(self)

    try:
        monkeypatch.setattr(Future, "__init__", counted)
        for n in range(3):
            store.record_request(KEY, float(n), n)
            store.add_anchor(KEY, Anchor(("r",), n, "p", 10, 1, created_at=float(n)))
            for _ in range(500):
                if store.writer.applied == 2 * (n + 1):
                    break
                await asyncio.sleep(0.002)
        assert store.writer.applied == 6 and made == []
        monkeypatch.undo()
        state = await store.load(KEY)
        assert state.last_estimate == 2 and len(state.anchors) == 3
    finally:
        monkeypatch.undo()
        await store.close()
