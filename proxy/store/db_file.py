"""The state database's file: where it lives, the modes it is created with, how it is opened.

`proxy.store.sqlite_db.StateDb.connect` opens the serving store's connection through these.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from proxy.store.base import StoreError

DB_FILE = "state.db"


def make_state_dir(root: Path) -> None:
    try:
        root.mkdir(mode=0o700, parents=True)
        os.chmod(root, 0o700)  # mkdir's mode is filtered by the umask
    except FileExistsError:
        pass


def prepare(root: Path) -> Path:
    make_state_dir(root)
    path = root / DB_FILE
    # SQLite gives the -wal and -shm files the database file's mode: create it 0600 first.
    os.close(os.open(path, os.O_CREAT | os.O_RDWR, 0o600))
    return path


def configure(conn: sqlite3.Connection) -> None:
    mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        raise StoreError(f"state database cannot use WAL mode (got {mode!r}); "
                         "put state.path on a local file system")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=5000")
