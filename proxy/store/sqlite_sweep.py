"""Retention on the SQLite store, the worker's half: find idle threads, remove them whole.

A thread's last activity is the later of its touch and its newest anchor's time, as `load`
reads it (`proxy.store.sqlite_db._active_at`): touches are written late, anchors at once. A
thread idle since before `before` goes with all it has: its row (activity, estimate,
microcompaction mark), its anchors, its checkpoints, and its history file.

Crash safety: a batch's rows go in one transaction, together with a row in `history_removals`
per thread; the history files are deleted after it commits, then those rows. A kill in between
leaves the rows of `history_removals`, and the next open deletes their files first
(`finish_removals`), before any request can write one again. Every function here runs on the
store's worker thread, as every statement does (`proxy.store.sqlite.SqliteStore`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store.base import Removed
from proxy.store.history import fsync_dir, remove_history
from proxy.store.sqlite_db import StateDb, key_args

# Idle since before the parameter (given twice): the touch, and the newest anchor's time (0
# for none, or for an anchor written before its time had a column and not filled since).
_IDLE = ("last_activity < ? AND coalesce((SELECT created_at FROM anchors "
         "WHERE anchors.tenant = threads.tenant AND anchors.thread = threads.thread "
         "ORDER BY id DESC LIMIT 1), 0) < ?")
# No index on the activity (every touch would pay for it): a sweep reads `threads` once, in
# key order, a batch at a time, each batch from where the last one stopped.
_IDLE_THREADS = (f"SELECT tenant, thread FROM threads WHERE (tenant, thread) > (?, ?) AND {_IDLE} "
                 "ORDER BY tenant, thread LIMIT ?")
_STILL_IDLE = f"SELECT 1 FROM threads WHERE tenant = ? AND thread = ? AND {_IDLE}"


def idle_threads(db: StateDb, before: float, after: ThreadKey | None,
                 limit: int) -> list[ThreadKey]:
    """Up to `limit` threads with no activity since `before`, in key order from after `after`
    (None: from the first); a read, no lock held."""
    start = ("", "") if after is None else key_args(after)
    rows = db.conn.execute(_IDLE_THREADS, (*start, before, before, limit))
    return [ThreadKey(tenant, thread) for tenant, thread in rows]


def remove_threads(db: StateDb, keys: Sequence[ThreadKey], before: float,
                   history_dir: Path) -> Removed:
    """Remove those of `keys` still idle since `before` (a touch may have been written since
    they were found), rows in one durable transaction, then their history files."""
    removed = db.write(_delete_rows, db, keys, before, durable=True)
    if not removed:
        return Removed()
    db.forget_threads(removed)
    freed = _delete_files(removed, history_dir)
    db.write(_forget_removals, db, removed)
    return Removed(len(removed), freed.files, freed.bytes)


def finish_removals(db: StateDb, history_dir: Path) -> Removed:
    """Delete the history files a removal interrupted by a kill left (before serving)."""
    pending = [ThreadKey(tenant, thread) for tenant, thread in
               db.conn.execute("SELECT tenant, thread FROM history_removals")]
    if not pending:
        return Removed()
    # A thread that has a row again is another by now: its file is its own.
    gone = [key for key in pending if not db.conn.execute(
        "SELECT 1 FROM threads WHERE tenant = ? AND thread = ?", key_args(key)).fetchone()]
    freed = _delete_files(gone, history_dir)
    db.write(_forget_removals, db, pending)
    return freed


def _delete_rows(db: StateDb, keys: Sequence[ThreadKey], before: float) -> list[ThreadKey]:
    conn = db.conn
    removed = []
    for key in keys:
        if conn.execute(_STILL_IDLE, (*key_args(key), before, before)).fetchone() is None:
            continue
        for table in ("anchors", "events", "threads"):
            conn.execute(f"DELETE FROM {table} WHERE tenant = ? AND thread = ?", key_args(key))
        conn.execute("INSERT OR IGNORE INTO history_removals (tenant, thread) VALUES (?, ?)",
                     key_args(key))
        removed.append(key)
    return removed


def _delete_files(keys: Sequence[ThreadKey], history_dir: Path) -> Removed:
    """The threads' history files deleted (an error stops here: the rows of
    `history_removals` stay, and the next open tries again)."""
    files = size = 0
    for key in keys:
        freed = remove_history(history_dir, key)
        if freed is not None:
            files, size = files + 1, size + freed
    if files:
        fsync_dir(history_dir)  # the names are gone for good before their rows are forgotten
    return Removed(0, files, size)


def _forget_removals(db: StateDb, keys: Sequence[ThreadKey]) -> None:
    db.conn.executemany("DELETE FROM history_removals WHERE tenant = ? AND thread = ?",
                        [key_args(key) for key in keys])
