"""The SQLite state store: `StateStore` over one `state.db`, run on one worker thread.

Every SQLite call runs on a single dedicated thread (`proxy.store.worker.Worker`) that owns
the connection; the event loop only submits jobs and awaits their futures. Jobs run in
submission order and each starts by draining the background writer, so the store reads its
own writes. See `proxy/store/base.py` for the guarantees of each method.

An open store owns its directory: it holds `proxy.store.lock.StateLock` until it closes, and
a second store (another proxy) on the same directory fails to open. Queued writes that fail
are logged as `state_write_failed` (rate-limited, see `proxy/store/failures.py`). A statement
that meets a damaged page raises `StateDamaged` and is logged as `state_damaged` (an ERROR
with the remedy, rate-limited too; see `proxy/store/damage.py`). Both are also told, each one
and unthrottled, to the `FailureHooks` the store was given (the metrics).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import structlog

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState
from proxy.store.base import ANCHORS_KEPT, LeaseLoss, Removed, StoreError, ThreadSummary, Touch
from proxy.store.damage import REMEDY, StateDamaged, is_damage
from proxy.store.failures import NO_HOOKS, FailureHooks, WriteFailures
from proxy.store.keys import DIGEST_PREFIX, storable_key, text_digest, thread_key_text
from proxy.store.lock import StateLock
from proxy.store.db_file import DB_FILE, make_state_dir
from proxy.store.history import HISTORY_DIR
from proxy.store.sqlite_db import AnchorWrite, StateDb
from proxy.store.sqlite_sweep import finish_removals, idle_threads, remove_threads
from proxy.store.worker import Worker
from proxy.store.writer import BackgroundWriter, Write

T = TypeVar("T")
_NEW_TUPLE = tuple.__new__  # an AnchorWrite built in C (see its docstring)

# How long a queued write may wait for company before its batch is committed. A kill within
# this window loses at most these touches and anchors (never a checkpoint: those are awaited).
# Each batch costs the worker a wake-up, a transaction and the GIL taken back from a busy loop
# several times. At 10 ms (and a statement step per anchor), a proxy answering some 3,000 small
# requests a second spent about three times the worker CPU per request that it does at 50 ms
# with `StateDb._insert_rows`; 50 ms alone halved it.
WRITE_DELAY_S = 0.05
# A damaged page fails every request of its threads: one `state_damaged` line this often.
DAMAGE_REPORT_INTERVAL_S = 60.0


class SqliteStore:
    shared = False  # one process owns the directory (`proxy.store.lock`)

    def __init__(self, root: str | Path, *, anchors_kept: int = ANCHORS_KEPT,
                 write_delay_s: float = WRITE_DELAY_S, log: Any = None,
                 check_on_open: bool = True, hooks: FailureHooks = NO_HOOKS) -> None:
        """`check_on_open`: run `PRAGMA quick_check` when opening, refusing a damaged file;
        `hooks`: told of every lost write and damaged statement."""
        self.root = Path(root)
        self._check_on_open = check_on_open
        self.path = self.root / DB_FILE
        self._anchors_kept = anchors_kept
        self._executor: Worker | None = None
        self._db: StateDb | None = None
        self._lock: StateLock | None = None
        self._closing = False
        self.writer = BackgroundWriter(self._apply_batch, self._write_failed)
        self._write_delay_s = write_delay_s
        # structlog's lazy logger: it binds the configuration in force when a line is written
        # (the store is built before logging is configured in some paths, and logs rarely).
        self._log = log if log is not None else structlog.get_logger("proxy")
        self._hooks = hooks
        self._failures = WriteFailures()
        self._damage = WriteFailures(DAMAGE_REPORT_INTERVAL_S)

    async def open(self) -> None:
        if self._executor is not None:
            return
        self._closing = False
        self._executor = Worker("state-store")
        try:
            self._lock, self._db = await self._run(self._open_owned)
        except BaseException:
            self._executor.shutdown()
            self._executor = None
            raise

    async def close(self) -> None:
        executor, db = self._executor, self._db
        if executor is None or db is None or self._closing:
            return
        self._closing = True  # from here on, new calls fail instead of racing the close
        await asyncio.wrap_future(executor.submit(self._after_drain, self._close_owned, db))
        self._executor = self._db = None
        executor.shutdown()  # its last job is done: nothing left to wait for

    async def flush(self) -> None:
        await self._run(lambda: None)

    # One queue for every write: a thread's or an id's are committed when all before are.
    async def written(self, key: ThreadKey) -> None:
        await self.flush()

    async def origin_written(self, made_id: str) -> None:
        await self.flush()

    async def load(self, key: ThreadKey) -> ThreadState:
        state = await self._run(self._require_db().load, storable_key(key))
        return replace(state, key=key)

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self._enqueue(partial(self._require_db().touch, storable_key(key), at, estimate))

    async def record_requests(self, touches: Sequence[Touch]) -> None:
        db = self._require_db()
        rows = [(storable_key(key), at, estimate) for key, at, estimate in touches]
        try:
            await self._run(db.write, db.touch_many, rows)
        except sqlite3.Error as error:  # a damaged page was logged by `_run` already
            # Reported as the queued writes' failures are; the caller keeps the touches.
            self._lost(len(rows), error)
            raise

    def add_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        self._enqueue(_NEW_TUPLE(AnchorWrite, (self._require_db(), storable_key(key), anchor)))

    async def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        self._enqueue(partial(self._require_db().add_origin, _storable_id(made_id), upstream, at))

    async def origin(self, made_id: str) -> str | None:
        return await self._run(self._require_db().origin, _storable_id(made_id))

    async def add_event(self, key: ThreadKey, event: CompactionEvent) -> CompactionEvent:
        db = self._require_db()
        return await self._awaited_write(db.add_event, storable_key(key), event, durable=True)

    async def set_microcompact(self, key: ThreadKey, mark: MicrocompactMark) -> None:
        db = self._require_db()
        await self._awaited_write(db.set_microcompact, storable_key(key), mark)

    async def list_threads(self, limit: int = 100) -> list[ThreadSummary]:
        return await self._run(self._require_db().list_threads, limit)

    async def find(self, thread_id: str) -> list[ThreadState]:
        return await self._run(self._require_db().find, thread_key_text(thread_id))

    async def events(self, key: ThreadKey) -> list[CompactionEvent]:
        return await self._run(self._require_db().events, storable_key(key))

    def compaction_lease(self, key: ThreadKey) -> AbstractAsyncContextManager[LeaseLoss]:
        return nullcontext()  # the one owner's per-thread lock keeps compactions apart

    async def lease_check(self, key: ThreadKey) -> None:
        return None  # one owner: the lease is never another's

    async def idle_threads(self, before: float, after: ThreadKey | None,
                           limit: int) -> list[ThreadKey]:
        """Up to `limit` threads (storable keys) with no activity since `before`, in key order
        after `after`."""
        return await self._run(idle_threads, self._require_db(), before, after, limit)

    async def remove_threads(self, keys: Sequence[ThreadKey], before: float) -> Removed:
        """Remove whole those of `keys` still idle since `before`: their rows in one
        transaction, then their history files (`proxy/store/sqlite_sweep.py`)."""
        return await self._run(remove_threads, self._require_db(), keys, before,
                               self.root / HISTORY_DIR)

    async def integrity_check(self) -> str:
        """`PRAGMA integrity_check`: "ok" for a sound database."""
        return await self._run(self._require_db().integrity_check)

    # -- the worker ---------------------------------------------------------------------

    def _open_owned(self) -> tuple[StateLock, StateDb]:
        make_state_dir(self.root)
        lock = StateLock.acquire(self.root)  # before any write: a second proxy changes nothing
        try:
            db = StateDb.connect(self.root, self._anchors_kept, check=self._check_on_open)
        except BaseException:
            lock.release()
            raise
        try:
            self._finish_removals(db)
        except BaseException:
            db.close()
            lock.release()
            raise
        return lock, db

    def _finish_removals(self, db: StateDb) -> None:
        """Before serving: the history files a sweep killed mid-way left behind."""
        freed = finish_removals(db, self.root / HISTORY_DIR)
        if freed.files:
            self._log.info("state_swept", threads=0, files=freed.files, bytes=freed.bytes,
                           interrupted=True)

    def _close_owned(self, db: StateDb) -> None:
        try:
            self._report(self._failures.take())
            db.close()
        finally:
            if self._lock is not None:
                self._lock.release()
                self._lock = None

    async def _awaited_write(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A write whose caller waits for it and logs its failure itself: only counted here."""
        try:
            return await self._run(self._require_db().write, fn, *args, **kwargs)
        except (sqlite3.Error, StateDamaged):  # not a store that is closing: nothing was tried
            self._hooks.writes_lost(1)
            raise

    def _write_failed(self, count: int, error: Exception) -> None:
        self._lost(count, error)
        if is_damage(error):
            self._damaged(error, count)

    def _lost(self, count: int, error: Exception) -> None:
        self._hooks.writes_lost(count)
        self._report(self._failures.record(count, error, time.monotonic()))

    def _damaged(self, error: Exception, count: int = 1) -> None:
        self._hooks.damaged()
        fields = self._damage.record(count, error, time.monotonic())
        if fields is None:
            return
        try:
            self._log.error("state_damaged", **fields, path=str(self.path), remedy=REMEDY,
                            check="compaction-proxy check-state")
        except Exception:  # noqa: BLE001 - as in `_report`
            pass

    def _report(self, fields: dict[str, Any] | None) -> None:
        if fields is None:
            return
        try:
            self._log.warning("state_write_failed", **fields, failed_total=self.writer.failed,
                              path=str(self.path))
        except Exception:  # noqa: BLE001 - a line that cannot be written must not fail the
            pass           # read or close whose drain found the failure

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        job = partial(self._after_drain, fn, *args, **kwargs)
        try:
            return await asyncio.wrap_future(self._require_executor().submit(job))
        except sqlite3.DatabaseError as error:
            if not is_damage(error):
                raise
            self._damaged(error)
            raise StateDamaged() from error

    def _after_drain(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        self.writer.drain()
        return fn(*args, **kwargs)

    def _enqueue(self, write: Write) -> None:
        # `_require_executor`, inline: every request queues a write or two.
        executor = self._executor
        if executor is None or self._closing:
            raise StoreError("state store is not open")
        if self.writer.put(write):
            # Queued writes wait a moment so that a busy proxy commits them in batches.
            asyncio.get_running_loop().call_later(self._write_delay_s, self._drain_soon, executor)

    def _drain_soon(self, executor: Worker) -> None:
        if self._executor is executor and not self._closing:
            executor.post(self.writer.drain)  # no future: nothing waits for it

    def _apply_batch(self, writes: Sequence[Write]) -> None:
        self._require_db().write_batch(writes)

    def _require_executor(self) -> Worker:
        if self._executor is None or self._closing:
            raise StoreError("state store is not open")
        return self._executor

    def _require_db(self) -> StateDb:
        if self._db is None:
            raise StoreError("state store is not open")
        return self._db


def _storable_id(made_id: str) -> str:
    """An answer's id as SQLite text can hold it: one with a lone surrogate (a client's JSON
    may send one) by its digest instead, which no upstream's id looks like."""
    try:
        made_id.encode("utf-8")
    except UnicodeEncodeError:
        return DIGEST_PREFIX + text_digest(made_id)
    return made_id
