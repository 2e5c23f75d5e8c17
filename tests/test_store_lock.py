"""One owner per state directory: a second store (a second proxy) is refused, readers are not."""

from __future__ import annotations

import asyncio
import fcntl
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from proxy.records import ThreadKey
from proxy.store import SqliteStore, StoreError
from proxy.store.lock import LOCK_FILE, StateLock
from tests.process import cli, write_config

KEY = ThreadKey("tenant-a", "thread-1")


async def test_a_second_store_on_the_same_directory_is_refused_naming_path_and_pid(
        tmp_path: Path) -> None:
    owner = SqliteStore(tmp_path / "state")
    await owner.open()
    try:
        second = SqliteStore(tmp_path / "state")
        with pytest.raises(StoreError) as refused:
            await second.open()
        message = str(refused.value)
        assert "\n" not in message and str(tmp_path / "state") in message
        assert "another proxy process" in message and f"pid {os.getpid()}" in message
        await second.close()  # never opened: nothing to do
        owner.record_request(KEY, 1.0, 5)  # the owner is untouched
        assert (await owner.load(KEY)).last_estimate == 5
    finally:
        await owner.close()


async def test_closing_the_owner_releases_the_directory(tmp_path: Path) -> None:
    first = SqliteStore(tmp_path)
    await first.open()
    await first.close()
    second = SqliteStore(tmp_path)
    await second.open()
    assert (tmp_path / "state.lock").read_text().strip() == str(os.getpid())
    await second.close()


async def test_a_killed_owner_leaves_no_stale_lock(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", "import asyncio, sys, time\n"
         "from proxy.store import SqliteStore\n"
         "store = SqliteStore(sys.argv[1]); asyncio.run(store.open())\n"
         "print('open', flush=True); time.sleep(60)\n", str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": _root()})
    try:
        assert owner.stdout is not None and owner.stdout.readline().strip() == "open"
        with pytest.raises(StoreError, match=f"pid {owner.pid}"):
            await SqliteStore(tmp_path).open()
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        if owner.stdout is not None:
            owner.stdout.close()
    again = SqliteStore(tmp_path)
    await again.open()
    await again.close()


async def test_a_second_proxy_on_the_same_state_path_does_not_start(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    owner = SqliteStore(tmp_path / "state")
    await owner.open()  # this test process plays the first proxy
    try:
        second = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "proxy", "serve", "--config", str(config)],
            capture_output=True, text=True, timeout=30, env={**os.environ, "PYTHONPATH": _root()})
    finally:
        await owner.close()
    assert second.returncode == 1
    assert second.stderr.count("\n") == 1 and "Traceback" not in second.stderr, second.stderr
    assert second.stderr.startswith(f"compaction-proxy: cannot open the state in {tmp_path / 'state'}")
    assert "another proxy process" in second.stderr


async def test_the_read_only_cli_works_while_the_owner_holds_the_directory(
        tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    owner = SqliteStore(tmp_path / "state")
    await owner.open()
    try:
        owner.record_request(KEY, 1.0, 321)
        await owner.flush()
        listed = cli("threads", "--config", str(config))
        assert listed.returncode == 0 and "thread-1" in listed.stdout, listed.stderr
        inspected = cli("inspect", "thread-1", "--config", str(config))
        assert inspected.returncode == 0 and '"last_estimate": 321' in inspected.stdout
    finally:
        await owner.close()


def _root() -> str:
    return str(Path(__file__).resolve().parents[1])


def test_a_proxy_waits_out_a_cli_readers_moment_on_the_lock(tmp_path: Path) -> None:
    """The read-only CLI holds `state.lock` shared for a moment while it tidies SQLite's side
    files (`reader.read_only_view`): a proxy starting then locks it once that is over."""
    fd = os.open(tmp_path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_SH)
    threading.Timer(0.2, os.close, (fd,)).start()
    StateLock.acquire(tmp_path).release()
