"""The read-only view of a state directory, for the `threads`, `inspect` and `check-state`
commands.

The database is opened with SQLite's `mode=ro`: no database is created (a mistyped
`state.path` is an error, not an empty store), nothing migrated, the journal mode left as it
is, and the owner's lock (`proxy/store/lock.py`) not taken to read, so it reads alongside a
running proxy (WAL gives a reader every commit). An older schema version is read as it is, down to
`schema.READABLE_FROM`: the new package's commands work beside the old proxy during an upgrade.
A file a first start left before its schema committed (a kill) reads as the empty state.

`mode=ro` still makes the -wal and -shm of a WAL database when they are missing (a clean stop
removes them) and the directory is writable. `read_only_view` removes them again after closing,
when no one else can be using them: no proxy holds `state.lock` (taken shared for the few
system calls of the removal, so none starts in between; without the file a proxy may be making
it) and no other connection holds the -shm's DMS lock byte, which SQLite holds shared in every
connection that has the -shm open. Otherwise they are left: the proxy's, or another reader's.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path

from proxy.store.base import StoreError
from proxy.store.damage import damaged_message, is_damage
from proxy.store.lock import LOCK_FILE
from proxy.store.schema import (MIGRATIONS, READABLE_FROM, current_version, migrate,
                                unversioned_problem)
from proxy.store.db_file import DB_FILE
from proxy.store.sqlite_db import StateDb


@contextmanager
def read_only_view(root: Path) -> Iterator[StateDb]:
    """`open_read_only(root)`, closed on leaving, with the directory left as it was found."""
    path = root / DB_FILE
    found = _side_files(path)
    try:
        with closing(open_read_only(root)) as db:
            yield db
    finally:  # an open that failed after SQLite made them too
        _remove_unused(root, _side_files(path) - found)


def _side_files(path: Path) -> set[Path]:
    return {side for side in (_wal(path), _shm(path)) if side.exists()}


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _shm(path: Path) -> Path:
    return path.with_name(path.name + "-shm")


def _remove_unused(root: Path, made: set[Path]) -> None:
    if not made:
        return
    held: list[int] = []
    try:
        if _unused(root, _shm(root / DB_FILE), held):
            for side in sorted(made):
                _remove_if_no_commit(side)
    finally:
        for fd in reversed(held):  # the locks go with the descriptors
            with suppress(OSError):
                os.close(fd)


def _remove_if_no_commit(side: Path) -> None:
    """A -wal that holds something came from a writer: never ours to remove."""
    with suppress(FileNotFoundError):
        if side.name.endswith("-shm") or side.stat().st_size == 0:
            side.unlink()


# SQLite's unix VFS: the dead-man-switch byte of the -shm, after its 8 WAL lock bytes at 120.
_SHM_DMS_BYTE = 128


def _unused(root: Path, shm: Path, held: list[int]) -> bool:
    """Whether no proxy and no other connection has the database open, kept so (no proxy
    starts, no connection opens the -shm) until the descriptors added to `held` close. Without
    a `state.lock` a proxy could be creating one: that counts as in use."""
    try:
        held.append(os.open(root / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC))
        fcntl.flock(held[-1], fcntl.LOCK_SH | fcntl.LOCK_NB)  # a proxy holds it LOCK_EX
        if shm.exists():
            held.append(os.open(shm, os.O_RDWR | os.O_CLOEXEC))
            fcntl.lockf(held[-1], fcntl.LOCK_EX | fcntl.LOCK_NB, 1, _SHM_DMS_BYTE)
    except OSError:  # no lock file, or a lock someone holds: leave the files be
        return False
    return True


def open_read_only(root: Path) -> StateDb:
    """`root/state.db` for reading, or StoreError with a one-line reason naming the path."""
    path = root / DB_FILE
    if not root.is_dir():
        raise StoreError(f"no state directory at {root} (check state.path)")
    if not path.is_file():
        raise StoreError(f"no state database at {path} (check state.path)")
    try:
        conn = _connect(path)
    except sqlite3.Error as error:
        if is_damage(error):  # what `serve` says of the same file, remedy included
            raise StoreError(damaged_message(path, [str(error)])) from None
        if getattr(error, "sqlite_errorname", None) == "SQLITE_READONLY_ROLLBACK":
            return _interrupted_write(path)
        raise StoreError(f"cannot read {path}: {error}") from None
    try:
        if _schema_not_created(conn):
            conn.close()
            return _empty_state()
        _check_version(conn, path)
    except BaseException:
        conn.close()
        raise
    return StateDb(conn)


def _schema_not_created(conn: sqlite3.Connection) -> bool:
    """No table, or only an empty `schema_version`: a first start stopped (killed) before its
    first migration committed (`serve` creates an empty file, sets WAL mode, creates
    `schema_version`, then migrates, each a step of its own). It holds no data: the next start
    creates the schema in it, and until then it reads as the empty state it is."""
    tables = {name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    return not tables or (tables == {"schema_version"} and current_version(conn) == 0)


def _interrupted_write(path: Path) -> StateDb:
    """The state for a `state.db` whose rollback journal is hot, which only a writer can roll
    back. The store journals so only before WAL mode is on, which the first start sets before
    anything else: that start was killed mid-way. The journal's header says how many pages the
    file had before the interrupted write (SQLite's journal format): none, then the rollback
    leaves an empty file, the empty state; otherwise (not the store's doing) the state cannot be
    read here until a writer rolls it back."""
    try:
        with open(f"{path}-journal", "rb") as journal:
            header = journal.read(_JOURNAL_HEADER)
    except OSError:
        header = b""
    if header[:8] == _JOURNAL_MAGIC and header[16:20] == bytes(4):
        return _empty_state()
    raise StoreError(f"{path} was left mid-write by a process that stopped (its journal "
                     f"{path.name}-journal is hot) and only a writer can roll it back: start "
                     "the proxy once, then run this again")


_JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")
_JOURNAL_HEADER = 20  # the magic, the page count, the nonce, the pages before the write


def _empty_state() -> StateDb:
    """A state with the current schema and no rows, in memory: nothing is written anywhere,
    and `check-state` finds it sound (a file without tables has nothing else to check)."""
    conn = sqlite3.connect(":memory:")
    migrate(conn)
    return StateDb(conn)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    try:
        _probe(conn)  # the open is lazy: the first read is where it fails
        return conn
    except sqlite3.OperationalError as error:
        conn.close()
        if error.sqlite_errorname != "SQLITE_CANTOPEN":
            raise
    # A WAL database needs its -shm file, which a read-only connection still creates when it
    # is missing (a clean stop removes it): on a read-only directory that fails. `immutable=1`
    # reads the database file alone, without the -shm and the -wal. That is what such a
    # directory holds after a clean stop; a proxy that still writes there (one whose dir is
    # read-only to us only) has commits in its -wal this view cannot see.
    conn = sqlite3.connect(path.resolve().as_uri() + "?immutable=1", uri=True)
    try:
        _probe(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _probe(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT count(*) FROM sqlite_master").fetchone()


def _check_version(conn: sqlite3.Connection, path: Path) -> None:
    try:
        found = current_version(conn)
    except sqlite3.Error as error:
        if is_damage(error):
            raise StoreError(damaged_message(path, [str(error)])) from None
        raise StoreError(f"{path} is not a compaction-proxy state database") from None
    if (problem := unversioned_problem(conn, path)) is not None:
        raise StoreError(problem)
    if found < READABLE_FROM:
        raise StoreError(f"{path} is at schema version {found}, older than this proxy reads "
                         f"({READABLE_FROM}); start the proxy once to migrate it")
    if found > len(MIGRATIONS):
        raise StoreError(f"{path} is at schema version {found}, newer than this proxy "
                         f"({len(MIGRATIONS)}); use a proxy that knows it")
