"""`threads`, `inspect` and `check-state` leave a stopped proxy's state directory as they found
it (SQLite makes a -wal and a -shm for a reader of a WAL database), and leave those files alone
while a proxy or another reader has the database open."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store.lock import StateLock
from proxy.store.reader import read_only_view
from tests.process import cli
from tests.test_cli_state import config_for, filled

COMMANDS = (["threads"], ["inspect", "short"], ["check-state"])
SIDE_FILES = {"state.db-shm", "state.db-wal"}


async def test_a_stopped_proxys_directory_is_left_as_it_was(tmp_path: Path) -> None:
    await filled(tmp_path / "state")
    config = config_for(tmp_path, tmp_path / "state")
    before = sorted(os.listdir(tmp_path / "state"))
    assert SIDE_FILES.isdisjoint(before)
    for command in COMMANDS:
        result = cli(*command, "--config", config)
        assert result.returncode == 0, (command, result.stderr)
        assert sorted(os.listdir(tmp_path / "state")) == before, command


async def test_the_files_stay_while_the_state_lock_is_held(tmp_path: Path) -> None:
    await filled(tmp_path / "state")
    config = config_for(tmp_path, tmp_path / "state")
    lock = StateLock.acquire(tmp_path / "state")  # a proxy starting: it has not opened yet
    try:
        assert cli("threads", "--config", config).returncode == 0
        assert SIDE_FILES <= set(os.listdir(tmp_path / "state"))
    finally:
        lock.release()


async def test_a_running_proxys_files_stay_and_it_goes_on_writing(tmp_path: Path) -> None:
    store = await filled(tmp_path / "state", keep_open=True)
    config = config_for(tmp_path, tmp_path / "state")
    try:
        for command in COMMANDS:
            assert cli(*command, "--config", config).returncode == 0, command
            assert SIDE_FILES <= set(os.listdir(tmp_path / "state")), command
        store.record_request(ThreadKey("tenant-a", "after"), 5000.0, 1)
        await store.flush()
    finally:
        await store.close()
    assert "after" in cli("threads", "--config", config).stdout


_READER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], uri=True)
conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
print("open", flush=True)
sys.stdin.read()
"""


async def test_the_files_stay_while_another_reader_has_the_database_open(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    await filled(state)
    with read_only_view(state) as db:
        db.list_threads(10)
        other = subprocess.Popen(
            [sys.executable, "-c", _READER, (state / "state.db").resolve().as_uri() + "?mode=ro"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert other.stdout is not None and other.stdout.readline() == "open\n"
        except BaseException:
            other.kill()
            raise
    try:
        assert SIDE_FILES <= set(os.listdir(state))  # the other reader's now
    finally:
        other.communicate("", timeout=30)
    with read_only_view(state) as db:  # they were there before: this one leaves them too
        db.list_threads(10)
    assert SIDE_FILES <= set(os.listdir(state))
