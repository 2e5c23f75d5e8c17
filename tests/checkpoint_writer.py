"""A child process for `tests/test_properties_checkpoint.py`: it runs a list of store writes the
way the proxy makes them and dies (`os._exit`, no cleanup) at a chosen crash point.

Run as `main(PLAN)` in a `python -c` child, PLAN the path of a pickled `Plan` (a `-m` run
would unpickle into a second copy of this module). The crash
points are counted in order: every SQL statement of the store's connection begun (a trace
callback), inside which the crash lands a drawn number of SQLite steps in (a progress handler:
a COMMIT half done included), and every history-file write, which the crash tears: a part of
its bytes reaches the file, the rest never.
A plan whose crash point is never reached ends normally, the store closed.

A compaction (`EventWrite`) is written as `proxy/server/compactor.py` writes one: cut the history
file back to the end the committed checkpoint recorded, append the summarized messages, then
the checkpoint with the file's new end (or, when the offload fails, with the old end and the
error).
"""

from __future__ import annotations

import asyncio
import os
import pickle
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.store import HistoryFiles, SqliteStore, StateDb
from proxy.store import history as history_module

OFFLOAD_ERROR = "OSError: No space left on device"


@dataclass(frozen=True)
class EventWrite:
    key: ThreadKey
    event: CompactionEvent  # its history fields are filled in as the compactor does
    records: tuple[dict[str, Any], ...]  # the summarized messages offloaded
    offload_fails: bool = False


@dataclass(frozen=True)
class AnchorWrite:
    key: ThreadKey
    anchor: Anchor


@dataclass(frozen=True)
class TouchWrite:
    key: ThreadKey
    at: float
    estimate: int | None


@dataclass(frozen=True)
class MarkWrite:
    key: ThreadKey
    mark: MicrocompactMark


@dataclass(frozen=True)
class Flush:
    """Wait until the queued writes are committed."""


Write = EventWrite | AnchorWrite | TouchWrite | MarkWrite | Flush


@dataclass(frozen=True)
class Plan:
    root: str
    writes: tuple[Write, ...]
    # Which crash point the crash lands on, as a share of the plan's points (counted by a first
    # run on a scratch copy): 0 the first, 1 none (the writes all commit).
    crash_share: float
    within: int  # SQLite steps into the statement it lands on: past its end, before the next
    tear: float  # of a history write it lands on, the share of bytes that reaches the file


CRASHED = 75  # the exit status of a crash; a plan run to its end exits with 0


class Crash:
    """Counts the crash points (SQL statements begun, history writes) of the store's worker
    thread and the history's threads, and dies at the chosen one (none: only counts)."""

    def __init__(self) -> None:
        self.at: int | None = None  # the chosen point, 0-based
        self.within = 0
        self.tear = 0.0
        self.seen = 0  # points begun
        self.steps = 0  # into the statement running
        self.armed = False  # the store's own opening is not a crash point
        self._lock = threading.Lock()

    def _begin(self) -> bool:
        """A point begins; True when it is the chosen one. Past it, the crash comes first."""
        with self._lock:
            self.seen, self.steps = self.seen + 1, 0
            if self.at is not None and self.seen - 1 > self.at:
                os._exit(CRASHED)
            return self.seen - 1 == self.at

    def statement(self, _sql: str) -> None:
        """SQLite's trace callback: a statement begins."""
        if self.armed:
            self._begin()

    def step(self) -> int:
        """SQLite's progress handler: dies inside the chosen statement."""
        if self.armed and self.at is not None and self.seen - 1 == self.at:
            self.steps += 1
            if self.steps > self.within:
                os._exit(CRASHED)
        return 0

    def write_all(self, fd: int, data: bytes) -> None:
        if self.armed and self._begin():
            os.write(fd, data[: int(len(data) * self.tear)])
            os._exit(CRASHED)
        _write_all(fd, data)


_write_all = history_module._write_all


def install(crash: Crash) -> None:
    connect = StateDb.connect.__func__  # type: ignore[attr-defined]

    def connect_watched(cls: type[StateDb], *args: Any, **kwargs: Any) -> StateDb:
        db = connect(cls, *args, **kwargs)
        db.conn.set_trace_callback(crash.statement)
        db.conn.set_progress_handler(crash.step, 1)
        return db

    StateDb.connect = classmethod(connect_watched)  # type: ignore[method-assign]
    history_module._write_all = crash.write_all


async def run(root: str, writes: tuple[Write, ...], crash: Crash) -> None:
    # No timer drains the queued writes: they are committed by the next awaited write (each
    # drains the queue first), a `Flush` or the close, so the crash points come in one order.
    store = SqliteStore(root, write_delay_s=3600.0)
    history = HistoryFiles.under(root)
    crash.armed = False
    await store.open()
    crash.seen, crash.armed = 0, True
    for write in writes:
        await apply(store, history, write)
    await store.close()


async def apply(store: SqliteStore, history: HistoryFiles, write: Write) -> None:
    if isinstance(write, EventWrite):
        await compaction(store, history, write)
    elif isinstance(write, AnchorWrite):
        store.add_anchor(write.key, write.anchor)
    elif isinstance(write, TouchWrite):
        store.record_request(write.key, write.at, write.estimate)
    elif isinstance(write, MarkWrite):
        await store.set_microcompact(write.key, write.mark)
    else:
        await store.flush()


async def compaction(store: SqliteStore, history: HistoryFiles, write: EventWrite) -> None:
    # `proxy.server.compactor.committed_end`, which the test checks against: importing the
    # server would double the child's start.
    latest = (await store.load(write.key)).event
    end = 0 if latest is None else latest.history_end
    if end is not None:
        end = (await history.discard_tail_async(write.key, end)).size
    if write.offload_fails:
        event = replace(write.event, history_file=None, history_end=end,
                        offload_error=OFFLOAD_ERROR)
    else:
        appended = await history.offload_async(write.key, write.records, write.event.created_at)
        event = replace(write.event, history_file=appended.path, history_end=appended.end,
                        offload_error=None)
    await store.add_event(write.key, event)


def main(plan_path: str) -> None:
    plan: Plan = pickle.loads(Path(plan_path).read_bytes())
    crash = Crash()
    install(crash)
    asyncio.run(run(plan.root + "-counted", plan.writes, crash))
    crash.at, crash.within, crash.tear = int(plan.crash_share * crash.seen), plan.within, plan.tear
    asyncio.run(run(plan.root, plan.writes, crash))
