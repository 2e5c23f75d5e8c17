"""`compaction-proxy threads`, `inspect` and `check-state`: the operator's view of the state.

All three open the state database read-only (`proxy.store.reader.read_only_view`): they never
write, read alongside a running proxy, and leave the directory as they found it. A problem is
one line on stderr and exit 1.
`threads` prints every id whole, as stored, so any id it lists can be given to `inspect`, and
on stderr how long an idle thread is kept (`state.retention_days`).

With `state.backend: redis` they read through a store opened `read_only` (no write command, no
script loaded: a read-only replica serves them) and print the same; `check-state` decodes every
thread's records and history lines there, and warns when the server would lose checkpoints on a
restart.
"""

from __future__ import annotations

import asyncio
import sqlite3
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from proxy import jsonio
from proxy.records import CompactionEvent, ThreadKey, ThreadState
from proxy.redaction import redacted_url
from proxy.settings import Settings
from proxy.store import History, StateDb, StateStore, StoreError, ThreadSummary, thread_key_text
from proxy.store.damage import REMEDY, damaged_message, is_damage
from proxy.store.db_file import DB_FILE
from proxy.store.reader import read_only_view
from proxy.store.redis_probe import Probe, probe

T = TypeVar("T")
_PROBLEMS_SHOWN = 100
_SQLITE_MAX_INT = 2 ** 63 - 1
HEADER = ("LAST ACTIVITY", "CHECKPOINTS", "LAST ESTIMATE", "TENANT", "THREAD")


def list_threads(settings: Settings, limit: int) -> int:
    # SQLite's LIMIT is a 64-bit integer; any larger limit already means every thread.
    limit = min(limit, _SQLITE_MAX_INT)
    summaries = _read_either(settings, lambda db: db.list_threads(limit),
                             lambda store: store.list_threads(limit))
    if summaries is None:
        return 1
    if not summaries:
        print(f"no threads in {_where(settings)}")
    else:
        for line in threads_table(summaries):
            print(line)
    # On stderr: stdout stays the table alone, for scripts (and `inspect`) to read.
    print(retention_note(settings.state.retention_days), file=sys.stderr)
    return 0


def retention_note(days: float) -> str:
    """What the state keeps, as `threads` says it."""
    if days <= 0:
        return "threads are kept until removed by hand (state.retention_days: 0)"
    return f"a thread idle more than {days:g} days is removed (state.retention_days: {days:g})"


def threads_table(summaries: list[ThreadSummary]) -> list[str]:
    """The thread id is the last column, whole: a stored id is at most 256 printable
    characters (or `~` and a digest), and it is what `inspect` takes. Only the tenant digest
    is shortened; `inspect` shows every tenant of an id."""
    rows = [HEADER] + [(_when(s.last_activity), str(s.event_count),
                        "-" if s.last_estimate is None else str(s.last_estimate), s.tenant[:12],
                        s.thread) for s in summaries]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER) - 1)]
    # No strip at the end: an id may end with a space.
    return ["  ".join([*(cell.ljust(w) for cell, w in zip(row, widths)), row[-1]]) for row in rows]


def inspect_thread(settings: Settings, thread_id: str) -> int:
    """Prints a JSON list, one state per tenant that has the id (most often one)."""
    wanted = thread_key_text(thread_id)
    states = _read_either(settings, lambda db: db.find(wanted), lambda store: store.find(wanted))
    if states is None:
        return 1
    if not states:
        _error(f"no thread {thread_id!r} in {_where(settings)}")
        return 1
    # A stored text may hold a lone surrogate (see `proxy/store/jsoncodec.py`).
    out = [state_as_data(state) for state in states]
    sys.stdout.write(jsonio.dumps_indented(out) + "\n")
    return 0


def check_state(settings: Settings) -> int:
    """`PRAGMA integrity_check` over the whole database (every page, index and constraint),
    read-only: it can run beside the serving proxy. Exit 0 when sound, 1 when damaged."""
    if settings.state.backend == "redis":
        return _check_redis(settings)
    path = Path(settings.state.path) / DB_FILE
    started = time.monotonic()
    verdict = _read(settings, lambda db: db.integrity_check())
    if verdict is None:
        return 1
    took = f"{time.monotonic() - started:.1f} s, {path.stat().st_size / 1e6:.1f} MB"
    if verdict == "ok":
        print(f"ok: {path} (integrity_check, {took})")
        return 0
    problems = verdict.split("; ")
    for problem in problems[:_PROBLEMS_SHOWN]:
        print(problem)
    if len(problems) > _PROBLEMS_SHOWN:
        print(f"... and {len(problems) - _PROBLEMS_SHOWN} more")
    _error(f"{path} is damaged ({len(problems)} problems, {took}); {REMEDY}")
    return 1


def _check_redis(settings: Settings) -> int:
    """PING, then read and decode every thread's records and history lines through the store's
    and the history's read methods; a warning when the server would lose checkpoints on a
    restart. Exit 0 when all decode, 1 when anything is damaged or unreadable."""
    started = time.monotonic()
    found = _read_redis(settings, partial(_every_thread_read, settings))
    if found is None:
        return 1
    probed, (problems, threads, lines) = found
    persistence = probed.persistence
    warning = persistence.warning()
    if warning:
        _error(f"warning: {warning}")
    took = f"{time.monotonic() - started:.1f} s"
    for problem in problems[:_PROBLEMS_SHOWN]:
        print(problem)
    if len(problems) > _PROBLEMS_SHOWN:
        print(f"... and {len(problems) - _PROBLEMS_SHOWN} more")
    if problems:
        _error(f"{_where(settings)} holds damaged records ({len(problems)} problems, {took})")
        return 1
    print(f"ok: {_where(settings)} ({threads} threads, {lines} history lines decoded, "
          f"{persistence.describe()}, {took})")
    return 0


async def _every_thread_read(settings: Settings, store: StateStore) -> tuple[list[str], int, int]:
    """(the problems found, the threads read, the history lines decoded). A record that does
    not decode is a problem; the server failing is not damage: it ends the check."""
    from proxy.store.redis_records import StateUnreadable
    history = _history_reader(settings)
    await history.open()
    try:
        problems: list[str] = []
        lines = 0
        try:
            summaries = await store.list_threads(_SQLITE_MAX_INT)
        except StateUnreadable as error:  # one thread's line: none can be listed
            return [f"the thread list: {error}"], 0, 0
        for summary in summaries:
            where = f"thread {summary.thread!r} (tenant {summary.tenant[:12]})"
            try:
                key = ThreadKey(summary.tenant, summary.thread)
                await store.load(key)
                events = await store.events(key)
            except StateUnreadable as error:  # the server failing is no damage: it goes on up
                problems.append(f"{where}: {error}")
                continue
            paths = sorted({e.history_file for e in events if e.history_file})
            for path in paths:
                read, problem = await _history_read(history, path)
                lines += read
                problems += [f"{where}: {problem}"] if problem else []
                short = _lines_missing(events, path, read)
                problems += [f"{where}: {short}"] if short else []
        return problems, len(summaries), lines
    finally:
        await history.close()


async def _history_read(history: History, path: str) -> tuple[int, str | None]:
    """(the lines that decode, what is wrong with the others or with `path`, if anything)."""
    try:
        contents = await history.read_async(path)
    except ValueError as error:  # not a history list under this prefix
        return 0, str(error)
    if not contents.torn:
        return len(contents.records), None
    shown = ", ".join(map(str, contents.damaged_lines[:10]))
    return len(contents.records), (f"{len(contents.damaged_lines)} history line(s) do not "
                                   f"decode (lines {shown}) in {path}")


def _lines_missing(events: list[CompactionEvent], path: str, held: int) -> str | None:
    """A checkpoint that counts more lines of `path` than it holds: lines it accounts for were
    cut (the list's lines are counted, not sized in bytes, on Redis only)."""
    latest = next((e for e in reversed(events) if e.history_file == path), None)
    if latest is None or latest.history_end is None or latest.history_end <= held:
        return None
    return (f"checkpoint {latest.seq} accounts for {latest.history_end} history lines, "
            f"{path} holds {held}")


# The records' field names, as the README and the `threads` table call them.
_SHOWN_AS = {"event": "checkpoint", "event_count": "checkpoints"}


def state_as_data(state: ThreadState) -> dict[str, Any]:
    data = asdict(state)
    data["key"] = {"tenant": state.key.tenant, "thread": state.key.thread}
    data.pop("extra", None)
    # Only the Redis store keeps it (to order touches of several instances): both backends'
    # output stays the same.
    data.pop("estimate_at", None)
    return {_SHOWN_AS.get(name, name): value for name, value in data.items()}


def _read_either(settings: Settings, on_sqlite: Callable[[StateDb], T],
                 on_redis: Callable[[StateStore], Awaitable[T]]) -> T | None:
    if settings.state.backend != "redis":
        return _read(settings, on_sqlite)
    read = _read_redis(settings, on_redis)
    return None if read is None else read[1]


def _read_redis(settings: Settings,
                action: Callable[[StateStore], Awaitable[T]]) -> tuple[Probe, T] | None:
    """What the server said of itself and the action's result over a read-only store, or None
    after reporting why it could not be read (the server named by its redacted URL)."""
    try:
        return asyncio.run(_with_store(settings, action))
    except StoreError as error:
        _error(str(error))
    except Exception as error:  # noqa: BLE001 - the client library's errors, one line each
        _error(f"cannot read the state on {_where(settings)}: {type(error).__name__}: {error}")
    return None


async def _with_store(settings: Settings,
                      action: Callable[[StateStore], Awaitable[T]]) -> tuple[Probe, T]:
    probed = await probe(settings.state.redis)  # redis is installed once it answered
    from proxy.store.redis_store import RedisStore
    server = settings.state.redis
    store = RedisStore(server.url, prefix=server.prefix, timeout_s=server.timeout_s,
                       read_only=True)
    await store.open()
    try:
        return probed, await action(store)
    finally:
        await store.close()


def _history_reader(settings: Settings) -> History:
    """The Redis history, for reading only: no script loaded."""
    from proxy.store.redis_history import RedisHistory
    return RedisHistory(settings.state.redis, read_only=True)


def _where(settings: Settings) -> str:
    state = settings.state
    if state.backend == "redis":
        return f"redis {redacted_url(state.redis.url)} (prefix {state.redis.prefix!r})"
    return state.path


def _read(settings: Settings, action: Callable[[StateDb], T]) -> T | None:
    """The action's result, or None after reporting why the database could not be read."""
    try:
        with read_only_view(Path(settings.state.path)) as db:
            return action(db)
    except StoreError as error:
        _error(str(error))
    except sqlite3.DatabaseError as error:
        if is_damage(error):  # a bad page that only this read reached
            _error(damaged_message(Path(settings.state.path) / DB_FILE, [str(error)]))
        else:
            _error(f"cannot read the state in {settings.state.path}: {error}")
    except (sqlite3.Error, OSError) as error:
        _error(f"cannot read the state in {settings.state.path}: {error}")
    return None


def _error(message: str) -> None:
    print(f"compaction-proxy: {message}", file=sys.stderr)


def _when(at: float | None) -> str:
    # With the offset: the log lines are in UTC, and a bare local time reads as hours off.
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(at))
