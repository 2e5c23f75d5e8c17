"""The SQLite schema as ordered migrations, and the one function that applies them.

Migration N is `MIGRATIONS[N - 1]`; a new schema version is one more function appended to
the tuple. Each migration runs in its own transaction together with its row in
`schema_version`, so a crash mid-migration leaves the previous version intact.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Sequence

from proxy.store.base import StoreError

Migration = Callable[[sqlite3.Connection], None]


def _initial(conn: sqlite3.Connection) -> None:
    conn.execute(
        """CREATE TABLE threads (
               tenant TEXT NOT NULL,
               thread TEXT NOT NULL,
               created_at REAL NOT NULL,
               last_activity REAL NOT NULL,
               last_estimate INTEGER,
               event_count INTEGER NOT NULL DEFAULT 0,
               microcompact TEXT,
               PRIMARY KEY (tenant, thread)
           ) WITHOUT ROWID""")
    conn.execute("CREATE INDEX threads_by_thread ON threads (thread)")
    conn.execute("CREATE INDEX threads_by_activity ON threads (last_activity)")
    conn.execute(
        """CREATE TABLE anchors (
               id INTEGER PRIMARY KEY AUTOINCREMENT,
               tenant TEXT NOT NULL,
               thread TEXT NOT NULL,
               data TEXT NOT NULL
           )""")
    conn.execute("CREATE INDEX anchors_by_thread ON anchors (tenant, thread, id)")
    conn.execute(
        """CREATE TABLE events (
               tenant TEXT NOT NULL,
               thread TEXT NOT NULL,
               seq INTEGER NOT NULL,
               created_at REAL NOT NULL,
               data TEXT NOT NULL,
               PRIMARY KEY (tenant, thread, seq)
           ) WITHOUT ROWID""")


def _origins(conn: sqlite3.Connection) -> None:
    # Which upstream made a background response or a stored chat completion
    # (proxy/server/origins.py), for the requests on it after a restart.
    conn.execute(
        """CREATE TABLE origins (
               id TEXT PRIMARY KEY,
               upstream TEXT NOT NULL,
               made_at REAL NOT NULL
           ) WITHOUT ROWID""")
    conn.execute("CREATE INDEX origins_by_age ON origins (made_at)")


def _plain_anchor_ids(conn: sqlite3.Connection) -> None:
    # AUTOINCREMENT updated `sqlite_sequence` on every insert, and an anchor is inserted for
    # every answer. A plain INTEGER PRIMARY KEY gives max(id) + 1 just the same; it could
    # reuse an id only once the table's newest row is deleted (a prune keeps its thread's
    # newest rows; only retention removes a thread's last ones, and the thread with them), and
    # even then a new id is above every id still there: a thread's ids still grow with
    # insertion order, which is all the reads (`ORDER BY id`) and prunes rely on. SQLite
    # cannot drop AUTOINCREMENT in place: the table is rebuilt, rows and ids as they are, in
    # this migration's transaction.
    conn.execute(
        """CREATE TABLE anchors_rebuilt (
               id INTEGER PRIMARY KEY,
               tenant TEXT NOT NULL,
               thread TEXT NOT NULL,
               data TEXT NOT NULL
           )""")
    conn.execute("INSERT INTO anchors_rebuilt (id, tenant, thread, data) "
                 "SELECT id, tenant, thread, data FROM anchors ORDER BY id")
    conn.execute("DROP TABLE anchors")  # its index and its `sqlite_sequence` row with it
    conn.execute("ALTER TABLE anchors_rebuilt RENAME TO anchors")
    conn.execute("CREATE INDEX anchors_by_thread ON anchors (tenant, thread, id)")


# A thread's newest anchor's time read from the anchors' JSON (inside a statement on
# `threads`), as the listing did before schema 4: 0 for none, or for one whose text is not JSON.
NEWEST_ANCHOR_AT = ("coalesce((SELECT CASE WHEN json_valid(data) "
                    "THEN json_extract(data, '$.created_at') END FROM anchors "
                    "WHERE anchors.tenant = threads.tenant AND anchors.thread = threads.thread "
                    "ORDER BY id DESC LIMIT 1), 0)")


def _anchor_times(conn: sqlite3.Connection) -> None:
    # A thread's last activity is the later of its touch and its newest anchor's time (see
    # `proxy.store.sqlite_db._active_at`). Listing threads read every thread's newest anchor,
    # its row and its JSON, to order them (30-65 ms at 10k threads). An anchor's time in a
    # column of its own, and in the index the thread's anchors are found by, lets the listing
    # read it from the index alone (some 12 ms). That index entry is written with the anchor
    # anyway: an anchor's write costs some 4k instructions more. (Kept on the thread's row
    # instead, the listing took 2-3 ms, but every answer's anchor then rewrote its thread's
    # row too: some 22k instructions more, a third of the anchor's write, for an operator's
    # command.)
    # A downgrade to 3 leaves the column, which a schema-3 proxy does not fill: this step then
    # runs again on the next upgrade and fills the anchors written meanwhile.
    columns = {row[1] for row in conn.execute("PRAGMA table_info(anchors)")}
    if "created_at" not in columns:
        conn.execute("ALTER TABLE anchors ADD COLUMN created_at REAL")
    conn.execute("UPDATE anchors SET created_at = CASE WHEN json_valid(data) "
                 "THEN json_extract(data, '$.created_at') END WHERE created_at IS NULL")
    conn.execute("DROP INDEX IF EXISTS anchors_by_thread")
    conn.execute("CREATE INDEX anchors_by_thread ON anchors (tenant, thread, id, created_at)")
    # Nothing reads threads by their touch alone; every touch paid for this index.
    conn.execute("DROP INDEX IF EXISTS threads_by_activity")


def _history_removals(conn: sqlite3.Connection) -> None:
    # The threads retention removed (`proxy/store/sqlite_sweep.py`) whose history file may still
    # be there: written with the removal of their rows, deleted once the files are. A kill in
    # between leaves the row, and the next open deletes the file. A downgrade to 4 leaves the
    # table (a schema-4 proxy never reads it): this step then runs again on the next upgrade.
    conn.execute(
        """CREATE TABLE IF NOT EXISTS history_removals (
               tenant TEXT NOT NULL,
               thread TEXT NOT NULL,
               PRIMARY KEY (tenant, thread)
           ) WITHOUT ROWID""")


MIGRATIONS: tuple[Migration, ...] = (_initial, _origins, _plain_anchor_ids, _anchor_times,
                                     _history_removals)
# From this version each anchor's time is a column (`anchors.created_at`), in its index.
ANCHOR_TIMES_FROM = MIGRATIONS.index(_anchor_times) + 1

# The oldest version the state commands (`proxy/store/reader.py`) read as it is: every migration
# since only added tables they do not read, rebuilt one with the same columns, or added what
# they read only when the version has it (`anchors.created_at`, from `ANCHOR_TIMES_FROM`). An upgrade
# installs the new package while the old proxy still serves its older state; the reader must
# not migrate under it (nor can: read-only). A migration that changes what they read raises
# this to its own version.
READABLE_FROM = 1


def current_version(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(row[0] or 0)


def unversioned_problem(conn: sqlite3.Connection, path: object) -> str | None:
    """Why a database at version 0 that already has tables cannot be used, or None.

    Only tampering makes one (a proxy writes version 1 in the transaction that creates the
    tables): migration 1 would fail on the first existing table, and the data is not ours to
    guess about."""
    if current_version(conn) != 0:
        return None
    tables = [name for (name,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "AND name != 'schema_version' ORDER BY name")]
    if not tables:
        return None
    return (f"{path} has tables ({', '.join(tables[:5])}) but no schema version: its "
            f"schema_version rows were removed, or it is another program's database; restore "
            f"it from a backup, or move it away to start from an empty state")


def migrate(conn: sqlite3.Connection, migrations: Sequence[Migration] = MIGRATIONS,
            path: object = "the state database") -> int:
    """Bring the database to the latest version; returns it. `conn` is in autocommit mode."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version "
                 "(version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    if (problem := unversioned_problem(conn, path)) is not None:
        raise StoreError(problem)
    applied = [_apply(conn, version, migrations[version - 1])
               for version in range(1, len(migrations) + 1)]
    if any(applied):
        # A migration's transaction is all in the WAL (a rebuilt table: the whole table), and
        # the WAL file keeps its largest size until the last connection closes: give it back.
        # A reader beside it (`inspect`) may keep part of it: that is only space, not data.
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    found = current_version(conn)
    if found > len(migrations):
        raise StoreError(f"{path} is at schema version {found}, newer than this proxy "
                         f"({len(migrations)}); upgrade the proxy or use another state.path")
    return found


def _apply(conn: sqlite3.Connection, version: int, migration: Migration) -> bool:
    """Run the migration unless the database has its version; True when it ran."""
    if current_version(conn) >= version:
        return False
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Checked inside the write lock: another process may have migrated meanwhile.
        ran = current_version(conn) < version
        if ran:
            migration(conn)
            conn.execute("INSERT INTO schema_version VALUES (?, ?)", (version, time.time()))
        conn.execute("COMMIT")
    except BaseException:
        # SQLite rolls back by itself on some errors (a full disk): a ROLLBACK then fails too,
        # and its "no transaction is active" would hide the error that matters.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return ran
