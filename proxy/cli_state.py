"""`compaction-proxy threads`, `inspect` and `check-state`: the operator's view of the state.

All three open the state database read-only (`proxy.store.open_read_only`): they create nothing,
never write, and read alongside a running proxy. A problem is one line on stderr and exit 1.
`threads` prints every id whole, as stored, so any id it lists can be given to `inspect`.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable
from contextlib import closing
from dataclasses import asdict
from pathlib import Path
from typing import Any, TypeVar

from proxy import jsonio
from proxy.records import ThreadState
from proxy.settings import Settings
from proxy.store import StateDb, StoreError, ThreadSummary, open_read_only, thread_key_text
from proxy.store.damage import REMEDY, damaged_message, is_damage
from proxy.store.db_file import DB_FILE

T = TypeVar("T")
_PROBLEMS_SHOWN = 100
_SQLITE_MAX_INT = 2 ** 63 - 1
HEADER = ("LAST ACTIVITY", "CHECKPOINTS", "LAST ESTIMATE", "TENANT", "THREAD")


def list_threads(settings: Settings, limit: int) -> int:
    # SQLite's LIMIT is a 64-bit integer; any larger limit already means every thread.
    summaries = _read(settings, lambda db: db.list_threads(min(limit, _SQLITE_MAX_INT)))
    if summaries is None:
        return 1
    if not summaries:
        print(f"no threads in {settings.state.path}")
        return 0
    for line in threads_table(summaries):
        print(line)
    return 0


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
    states = _read(settings, lambda db: db.find(thread_key_text(thread_id)))
    if states is None:
        return 1
    if not states:
        _error(f"no thread {thread_id!r} in {settings.state.path}")
        return 1
    # A stored text may hold a lone surrogate (see `proxy/store/jsoncodec.py`).
    out = [state_as_data(state) for state in states]
    sys.stdout.write(jsonio.dumps_indented(out) + "\n")
    return 0


def check_state(settings: Settings) -> int:
    """`PRAGMA integrity_check` over the whole database (every page, index and constraint),
    read-only: it can run beside the serving proxy. Exit 0 when sound, 1 when damaged."""
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


# The records' field names, as the README and the `threads` table call them.
_SHOWN_AS = {"event": "checkpoint", "event_count": "checkpoints"}


def state_as_data(state: ThreadState) -> dict[str, Any]:
    data = asdict(state)
    data["key"] = {"tenant": state.key.tenant, "thread": state.key.thread}
    data.pop("extra", None)
    return {_SHOWN_AS.get(name, name): value for name, value in data.items()}


def _read(settings: Settings, action: Callable[[StateDb], T]) -> T | None:
    """The action's result, or None after reporting why the database could not be read."""
    try:
        with closing(open_read_only(Path(settings.state.path))) as db:
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
