"""A damaged `state.db`: how it is recognised, checked, reported, and what the operator does.

A bad header is found when the database opens; a bad page only when a statement reads it.
So the serving store checks the file with `PRAGMA quick_check` when it opens (0.1-0.3 s for
a 169 MB state of 5,000 threads with 3 checkpoints each, page cache warm; it reads every page,
so a cold cache costs about the time to read the file; `state.check_on_start: false` skips
it), `compaction-proxy check-state` runs the full `integrity_check` (0.3-0.7 s there) beside
a running proxy, and a statement that meets a bad page while serving fails its request with
`StateDamaged` (OpenAI's error shape, code `state_damaged`): threads whose rows are readable
keep working.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from proxy.errors import ProxyError
from proxy.store.base import StoreError

REMEDY = ("stop the proxy, then restore state.db from a backup, or recover what is readable "
          "(sqlite3 state.db .recover | sqlite3 recovered.db, then put recovered.db in its "
          "place), or move state.db away to start from an empty state (each thread then "
          "compacts again from the full conversation its client sends)")
_SHOWN_PROBLEMS = 3


class StateDamaged(StoreError, ProxyError):
    """A statement met a damaged page: the request fails, the proxy keeps serving."""

    status = 500
    type = "server_error"
    code = "state_damaged"

    def __init__(self) -> None:
        super().__init__("The proxy's state database (state.db) is damaged where this "
                         "thread's state is kept, so the request cannot be served. The "
                         "proxy's operator must restore or recover it; see the proxy's log "
                         "(state_damaged).")


class UnreadableRow(sqlite3.DatabaseError):
    """A row SQLite reads but the proxy cannot decode (its JSON broken, or not the record it
    should be): bit rot inside a payload passes every SQLite check. A `sqlite3.DatabaseError`,
    so every path that reports a database error reports this one."""


def is_damage(error: BaseException) -> bool:
    """A malformed page (SQLITE_CORRUPT and its extended codes), a file that is not a
    database (SQLITE_NOTADB), or an `UnreadableRow`. Never a busy, full or read-only one."""
    if isinstance(error, UnreadableRow):
        return True
    code = getattr(error, "sqlite_errorname", None) or ""
    return isinstance(error, sqlite3.DatabaseError) and (
        code.startswith("SQLITE_CORRUPT") or code == "SQLITE_NOTADB")


def check(conn: sqlite3.Connection, pragma: str = "quick_check") -> list[str]:
    """The problems `PRAGMA quick_check` (or `integrity_check`) finds; [] for a sound file.
    A check that itself stops on a damaged page reports that as its one problem."""
    try:
        rows = [str(row[0]) for row in conn.execute(f"PRAGMA {pragma}")]
    except sqlite3.DatabaseError as error:
        if not is_damage(error):
            raise
        return [str(error)]
    return [] if rows == ["ok"] else rows


def damaged_message(path: Path, problems: list[str]) -> str:
    """One line for the operator: which file, what SQLite found (the first few), the remedy."""
    shown = "; ".join(problems[:_SHOWN_PROBLEMS])
    hidden = len(problems) - _SHOWN_PROBLEMS
    more = f" (and {hidden} more)" if hidden > 0 else ""
    return f"{path} is damaged: {shown}{more}; {REMEDY}"
