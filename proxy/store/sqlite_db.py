"""The synchronous half of the SQLite store: one connection, owned by one worker thread.

Nothing here is async; `proxy.store.sqlite.SqliteStore` runs every call on its worker.
The connection keeps sqlite3's `check_same_thread`, so a call from any other thread (the
event loop's, by mistake) fails loudly instead of blocking it. Statement methods take
storable keys (`proxy.store.keys.storable_key`) and run inside `write`/`write_batch`.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from functools import cache
from itertools import chain, repeat
from operator import add, attrgetter, is_, itemgetter
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from proxy.lru import LRU
from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState
from proxy.store import jsoncodec
from proxy.store import damage
from proxy.store.base import ANCHORS_KEPT, StoreError, ThreadSummary
from proxy.store.db_file import configure, prepare
from proxy.store.schema import ANCHOR_TIMES_FROM, NEWEST_ANCHOR_AT, current_version, migrate

T = TypeVar("T")
_KNOWN_THREADS = 10_000
# OpenAI keeps stored responses and chat completions 30 days by default [MEM: not re-verified
# this session]; an id older than that is gone upstream as well.
ORIGINS_KEPT_S = 30 * 86_400.0


class StateDb:
    def __init__(self, conn: sqlite3.Connection, anchors_kept: int = ANCHORS_KEPT) -> None:
        self.conn = conn  # and the write cursor with it (the setter)
        self.anchors_kept = anchors_kept
        # Threads known to have their row (only retention deletes one, `forget_threads`): an
        # anchor for one of them skips the insert-or-ignore. Per thread, anchors inserted since
        # its last prune.
        self._known: LRU[ThreadKey, int] = LRU(_KNOWN_THREADS)

    @classmethod
    def connect(cls, root: Path, anchors_kept: int = ANCHORS_KEPT, *,
                check: bool = False) -> StateDb:
        """Open (creating directory 0700 and file 0600) and migrate `root/state.db`; with
        `check`, refuse (StoreError) a file that `PRAGMA quick_check` finds damaged."""
        path = prepare(root)
        conn = sqlite3.connect(path, isolation_level=None, timeout=5.0)
        try:
            configure(conn)
            migrate(conn, path=path)
            problems = damage.check(conn) if check else []
        except sqlite3.DatabaseError as error:
            conn.close()
            if damage.is_damage(error):
                raise StoreError(damage.damaged_message(path, [str(error)])) from None
            raise
        except BaseException:
            conn.close()
            raise
        if problems:
            conn.close()
            raise StoreError(damage.damaged_message(path, problems))
        return cls(conn, anchors_kept)

    @property
    def conn(self) -> sqlite3.Connection:
        return self._conn

    @conn.setter
    def conn(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        # The statements of every queued batch (BEGIN, the anchors' INSERT, COMMIT) run on one
        # cursor kept open: `conn.execute` makes a cursor and frees it for each statement, and
        # a quiet proxy runs a batch per answer. Each statement is reset when it completes: the
        # cursor holds no lock between batches.
        self._writes = conn.cursor()

    def close(self) -> None:
        self.conn.close()

    def forget_threads(self, keys: Sequence[ThreadKey]) -> None:
        """These threads' rows were deleted: their next anchor inserts the row again."""
        for key in keys:
            self._known.pop(key)

    # -- transactions -------------------------------------------------------------------

    def write(self, fn: Callable[..., T], *args: Any, durable: bool = False) -> T:
        """Run one statement method in its own transaction; `durable` syncs the commit."""
        return self._transaction(durable, fn, *args)

    def write_batch(self, writes: Sequence[Callable[[], object]]) -> None:
        """Every write in one transaction. Anchors go last, all threads' together
        (`_insert_rows`; the other queued writes touch threads, which commutes with adding
        anchors)."""
        self._transaction(False, self._batch, writes)

    def _batch(self, writes: Sequence[Callable[[], object]]) -> None:
        anchors = self._run_others(writes)
        if len(anchors) == 1:
            anchors[0]()
        elif anchors:
            self._insert_anchors(anchors)

    def _run_others(self, writes: Sequence[Callable[[], object]]) -> list[AnchorWrite]:
        """Run the writes that are not this database's anchors; returns those, in order."""
        # The usual batch of a busy proxy, its anchors alone, is recognised in C.
        if (len(writes) > 1 and all(map(isinstance, writes, repeat(AnchorWrite)))
                and all(map(is_, map(_DB_OF, writes), repeat(self)))):
            return list(writes)  # type: ignore[arg-type]
        anchors: list[AnchorWrite] = []
        for write in writes:
            if isinstance(write, AnchorWrite) and write.db is self:
                anchors.append(write)
            else:
                write()
        return anchors

    def _transaction(self, durable: bool, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` in one transaction, rolled back if it raises.

        A call, not a generator-based context manager: every batch of queued writes runs one,
        and the `with` cost some 100 Python steps of `contextlib` each time."""
        # WAL + synchronous=NORMAL: every commit is atomic and survives a process crash (it
        # is in the OS page cache); only a power loss may roll back the latest commits.
        # Checkpoints commit with FULL (WAL fsynced): losing one would mean a second paid
        # summary and duplicate lines in the already-fsynced history file.
        if durable:
            self.conn.execute("PRAGMA synchronous=FULL")
        try:
            self._writes.execute("BEGIN IMMEDIATE")
            try:
                result = fn(*args)
                self._writes.execute("COMMIT")
            except BaseException:
                self._known = LRU(_KNOWN_THREADS)  # it may name a row the rollback removed
                # A failed COMMIT (a full disk) may have rolled back already: a ROLLBACK then
                # fails too, and its error would hide the one that matters.
                if self.conn.in_transaction:
                    self.conn.execute("ROLLBACK")
                raise
            return result
        finally:
            if durable:
                self.conn.execute("PRAGMA synchronous=NORMAL")

    # -- writes (inside a transaction) ----------------------------------------------------

    def touch(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self.conn.execute(_TOUCH, (key.tenant, key.thread, at, at, estimate))

    def touch_many(self, touches: Sequence[tuple[ThreadKey, float, int | None]]) -> None:
        """`touch` each, in order."""
        self._writes.executemany(_TOUCH, [(key.tenant, key.thread, at, at, estimate)
                                          for key, at, estimate in touches])

    def add_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        """One anchor: a quiet proxy's batch, and every queued anchor a bad batch retries."""
        added = self._known.get(key)
        if added is None:
            self._ensure_thread(key, anchor.created_at)
            added = 0
        self._writes.execute(_INSERT_ANCHOR, (key.tenant, key.thread,
                                              jsoncodec.dumps_text(anchor.to_data()),
                                              anchor.created_at))
        added += 1
        if added >= self.anchors_kept:
            self._prune(key)
            added = 0
        self._known.put(key, added)

    def _insert_anchors(self, writes: list[AnchorWrite]) -> None:
        """Append anchors, oldest first. A thread's rows past the newest `anchors_kept` are
        pruned once that many were added since its last prune: a thread holds at most twice
        that many rows, and a busy one pays one insert per anchor, not an insert and a delete.

        The writer thread shares the event loop's GIL, and a busy proxy queues an anchor per
        answer: the usual batch (each thread once, known, no prune due) runs no Python step
        per anchor besides its serialization. A batch of one goes to `add_anchor`: grouping
        costs more than it saves there."""
        kept = self.anchors_kept
        keys = list(map(_KEY_OF, writes))
        threads = list(dict.fromkeys(keys))  # in order of first appearance
        if len(threads) == len(keys):  # one anchor each: the usual batch
            per_thread: Sequence[int] = [1] * len(threads)
        else:
            counted = Counter(keys)
            if max(counted.values()) > kept:
                # Only a thread's newest `kept` can survive its prune: only those are inserted.
                writes = _newest(writes, counted, kept)
                keys = list(map(_KEY_OF, writes))
                counted = Counter(keys)
            threads, per_thread = list(counted), list(counted.values())
        before = self._known.peek_many(threads)
        if None in before:  # threads whose row may not exist yet
            first = _first_anchors(writes)
            for key, count in zip(threads, before):
                if count is None:
                    self._ensure_thread(key, first[key].created_at)
            before = [count or 0 for count in before]
        anchors = list(map(_ANCHOR_OF, writes))
        self._insert_rows(list(chain.from_iterable(zip(
            map(_TENANT_OF, keys), map(_THREAD_OF, keys),
            jsoncodec.dumps_texts(list(map(Anchor.to_data, anchors))), map(_CREATED_AT, anchors)))))
        added = list(map(add, before, per_thread))  # type: ignore[arg-type]
        if max(added) >= kept:
            for i, key in enumerate(threads):
                if added[i] >= kept:
                    self._prune(key)
                    added[i] = 0
        self._known.put_many(threads, added)

    def _insert_rows(self, values: list[Any]) -> None:
        """Insert anchor rows, given as one flat list of their columns' values, in statements of
        many rows each, largest first (power-of-two sizes: few distinct statements to cache).

        Not `executemany`: it steps once per row, and sqlite3 lets go of the GIL for every
        step. On a busy proxy the event loop holds the GIL nearly all the time, so the worker
        waited for it after each row's step (about one context switch per anchor)."""
        start, left, rows = 0, len(values) // _COLUMNS, _MOST_ROWS
        while left:
            while rows > left:
                rows >>= 1
            end = start + rows * _COLUMNS
            self._writes.execute(_anchor_insert(rows), values[start:end])
            start, left = end, left - rows

    def _prune(self, key: ThreadKey) -> None:
        """Delete the thread's anchors older than its newest `anchors_kept`."""
        self.conn.execute(
            "DELETE FROM anchors WHERE tenant = ? AND thread = ? AND id <= ("
            "SELECT id FROM anchors WHERE tenant = ? AND thread = ? "
            "ORDER BY id DESC LIMIT 1 OFFSET ?)", (*key_args(key), *key_args(key),
                                                   self.anchors_kept))

    def add_event(self, key: ThreadKey, event: CompactionEvent) -> CompactionEvent:
        self._ensure_thread(key, event.created_at)
        seq = self._event_count(key) + 1
        stored = replace(event, seq=seq)
        self.conn.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?)",
                          (*key_args(key), seq, event.created_at,
                           jsoncodec.dumps_text(stored.to_data())))
        self.conn.execute("UPDATE threads SET event_count = ? WHERE tenant = ? AND thread = ?",
                          (seq, *key_args(key)))
        return stored

    def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        """Which upstream made `made_id`; rows older than `ORIGINS_KEPT_S` go at the same time
        (one range on an index: nothing to do most times)."""
        self.conn.execute("INSERT OR REPLACE INTO origins (id, upstream, made_at) VALUES (?, ?, ?)",
                          (made_id, upstream, at))
        self.conn.execute("DELETE FROM origins WHERE made_at < ?", (at - ORIGINS_KEPT_S,))

    def origin(self, made_id: str) -> str | None:
        row = self.conn.execute("SELECT upstream FROM origins WHERE id = ?", (made_id,)).fetchone()
        return row[0] if row else None

    def set_microcompact(self, key: ThreadKey, mark: MicrocompactMark) -> None:
        self._ensure_thread(key, mark.created_at)
        self.conn.execute("UPDATE threads SET microcompact = ? WHERE tenant = ? AND thread = ?",
                          (jsoncodec.dumps_text(mark.to_data()), *key_args(key)))

    def _ensure_thread(self, key: ThreadKey, at: float) -> None:
        at = at or time.time()
        self.conn.execute("INSERT INTO threads (tenant, thread, created_at, last_activity) "
                          "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, thread) DO NOTHING",
                          (*key_args(key), at, at))

    def _event_count(self, key: ThreadKey) -> int:
        row = self.conn.execute("SELECT event_count FROM threads WHERE tenant = ? AND thread = ?",
                                key_args(key)).fetchone()
        return int(row[0]) if row else 0

    # -- reads --------------------------------------------------------------------------

    def load(self, key: ThreadKey) -> ThreadState:
        with self._snapshot():
            row = self.conn.execute(
                "SELECT created_at, last_activity, last_estimate, event_count, microcompact "
                "FROM threads WHERE tenant = ? AND thread = ?", key_args(key)).fetchone()
            if row is None:
                return ThreadState(key)
            created_at, last_activity, last_estimate, event_count, microcompact = row
            anchors = self._anchors(key)
            return ThreadState(
                key, created_at=created_at, last_activity=_active_at(last_activity, anchors),
                anchors=anchors, event=self._latest_event(key),
                event_count=event_count,
                microcompact=decoded(MicrocompactMark, microcompact)
                if microcompact else None,
                last_estimate=last_estimate)

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """The reads inside see one commit. A reader beside the running proxy (`inspect`)
        would otherwise see a thread's row from before a checkpoint and the checkpoint after."""
        if self.conn.in_transaction:
            yield
            return
        self.conn.execute("BEGIN")
        try:
            yield
        finally:
            if self.conn.in_transaction:
                self.conn.execute("ROLLBACK")  # read only: nothing to keep, nothing to fail

    def _anchors(self, key: ThreadKey) -> tuple[Anchor, ...]:
        rows = self.conn.execute("SELECT data FROM anchors WHERE tenant = ? AND thread = ? "
                                 "ORDER BY id DESC LIMIT ?", (*key_args(key), self.anchors_kept))
        return tuple(decoded(Anchor, data) for (data,) in rows)

    def _latest_event(self, key: ThreadKey) -> CompactionEvent | None:
        row = self.conn.execute("SELECT data FROM events WHERE tenant = ? AND thread = ? "
                                "ORDER BY seq DESC LIMIT 1", key_args(key)).fetchone()
        return decoded(CompactionEvent, row[0]) if row else None

    def events(self, key: ThreadKey) -> list[CompactionEvent]:
        rows = self.conn.execute("SELECT data FROM events WHERE tenant = ? AND thread = ? "
                                 "ORDER BY seq", key_args(key))
        return [decoded(CompactionEvent, data) for (data,) in rows]

    def list_threads(self, limit: int) -> list[ThreadSummary]:
        """The most recently active threads, by `_active_at` as `load` gives it: the later of
        the touch and the newest anchor's time, read from the anchors' index. A state older
        than that (read beside the proxy that still serves it) has every newest anchor's JSON
        read."""
        if current_version(self.conn) >= ANCHOR_TIMES_FROM:
            query = _LIST_THREADS
        else:
            query = _LIST_THREADS_READING_ANCHORS
        return [ThreadSummary(*row) for row in self.conn.execute(query, (limit,))]

    def find(self, thread: str) -> list[ThreadState]:
        rows = self.conn.execute("SELECT tenant FROM threads WHERE thread = ? ORDER BY tenant",
                                 (thread,)).fetchall()
        return [self.load(ThreadKey(tenant, thread)) for (tenant,) in rows]

    def integrity_check(self) -> str:
        """"ok", or the problems `PRAGMA integrity_check` finds, joined by "; "."""
        return "; ".join(damage.check(self.conn, "integrity_check")) or "ok"


_LIST_THREADS = (
    "SELECT thread, tenant, created_at, max(last_activity, coalesce(("
    "SELECT anchors.created_at FROM anchors WHERE anchors.tenant = threads.tenant "
    "AND anchors.thread = threads.thread ORDER BY id DESC LIMIT 1), 0)) AS active, "
    "event_count, last_estimate FROM threads ORDER BY active DESC LIMIT ?")
_LIST_THREADS_READING_ANCHORS = (
    f"SELECT thread, tenant, created_at, max(last_activity, {NEWEST_ANCHOR_AT}) AS active, "
    f"event_count, last_estimate FROM threads ORDER BY active DESC LIMIT ?")
_COLUMNS = 4  # of an anchor row, as `_anchor_insert` names them
# 512 parameters a statement: within SQLite's smallest default limit (999, before 3.32).
_MOST_ROWS = 128


@cache
def _anchor_insert(rows: int) -> str:
    """The insert of `rows` anchor rows in one statement."""
    return ("INSERT INTO anchors (tenant, thread, data, created_at) VALUES "
            + ", ".join(["(?, ?, ?, ?)"] * rows))


_INSERT_ANCHOR = _anchor_insert(1)
_TOUCH = ("INSERT INTO threads (tenant, thread, created_at, last_activity, last_estimate) "
          "VALUES (?, ?, ?, ?, ?) ON CONFLICT (tenant, thread) DO UPDATE SET "
          "last_activity = max(last_activity, excluded.last_activity), "
          "last_estimate = coalesce(excluded.last_estimate, last_estimate)")


class AnchorWrite(NamedTuple):
    """A queued `add_anchor`, recognisable in a batch so that `write_batch` can group it.

    A named tuple, one queued for every answer: built with `tuple.__new__`, in C, where the
    class's own `__new__` is a Python function, about twice the instructions."""

    db: StateDb
    key: ThreadKey
    anchor: Anchor

    def __call__(self) -> None:
        self.db.add_anchor(self.key, self.anchor)


_DB_OF, _KEY_OF, _ANCHOR_OF = itemgetter(0), itemgetter(1), itemgetter(2)  # of an `AnchorWrite`
_TENANT_OF, _THREAD_OF = itemgetter(0), itemgetter(1)  # of a `ThreadKey`
_CREATED_AT = attrgetter("created_at")  # of an `Anchor`


def _newest(writes: list[AnchorWrite], per_thread: Counter[ThreadKey],
            kept: int) -> list[AnchorWrite]:
    """`writes` without the anchors of a thread older than its newest `kept`."""
    skip = {key: count - kept for key, count in per_thread.items() if count > kept}
    out = []
    for write in writes:
        left = skip.get(write.key, 0)
        if left > 0:
            skip[write.key] = left - 1
        else:
            out.append(write)
    return out


def _first_anchors(writes: list[AnchorWrite]) -> dict[ThreadKey, Anchor]:
    first: dict[ThreadKey, Anchor] = {}
    for write in writes:
        first.setdefault(write.key, write.anchor)
    return first


def _active_at(touched: float, anchors: Sequence[Anchor]) -> float:
    """The thread's last activity: its persisted touch, or its newest anchor's time if later.

    Touches are held back up to `proxy.store.cached.TOUCH_INTERVAL_S` and a kill loses them;
    the anchor of each answer is queued at once (written within `WRITE_DELAY_S`), so after a
    kill the last answer stands in for the touches lost with it."""
    return max(touched, anchors[0].created_at) if anchors else touched


def decoded(record: Any, text: str) -> Any:
    """`record.from_data` of a stored JSON text, or `damage.UnreadableRow` naming the record
    type (never the text: it holds client content)."""
    try:
        return record.from_data(jsoncodec.loads(text))
    except (ValueError, TypeError, AttributeError) as error:  # JSON errors are ValueErrors
        raise damage.UnreadableRow(f"a stored {record.__name__} cannot be decoded "
                                   f"({type(error).__name__})") from None


def key_args(key: ThreadKey) -> tuple[str, str]:
    return key.tenant, key.thread
