"""`threads`, `inspect` and `check-state` on `state.backend: redis` send no write: they read a
read-only replica as they read its primary, load no script, and see a thread whose layout
version key is gone (a Redis restart without persistence, an eviction)."""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from proxy.store.redis_eval import sha
from proxy.store.redis_keys import RedisKeys
from proxy.store.redis_scripts import ALL
from proxy.store.redis_store import RedisStore
from tests.process import cli
from tests.redis_fixtures import redis_client as raw  # noqa: F401
from tests.redis_server import RedisServer, started_or_skipped, stop_redis_server
from tests.test_cli_state_redis import checkpointed_thread, fill, redis_config

COMMANDS = (["threads"], ["inspect", "t1"], ["check-state"])
_WITH_SUBCOMMANDS = ("SCRIPT", "CONFIG", "CLIENT", "FUNCTION", "COMMAND", "OBJECT")
SYNC_S = 20.0


@pytest.fixture
def replica(redis_server: RedisServer) -> Iterator[RedisServer]:
    """A second server, a read-only replica of the tests' one, in sync."""
    binary = shutil.which("redis-server")
    assert binary is not None
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    directory = redis_server.directory / f"replica-{port}"
    directory.mkdir()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(directory), "--replicaof", "127.0.0.1", str(redis_server.port),
         "--loglevel", "warning"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    server = RedisServer(f"redis://127.0.0.1:{port}/0", port, process, directory)
    try:
        _wait_in_sync(port)
        yield server
    finally:
        stop_redis_server(server, keep_directory=True)


def _wait_in_sync(port: int) -> None:
    deadline = time.monotonic() + SYNC_S
    while time.monotonic() < deadline:
        try:
            with redis.Redis(port=port) as client:
                if client.info("replication").get("master_link_status") == "up":
                    return
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the replica did not sync")


def _caught_up(primary_port: int, replica_port: int) -> None:
    """Until the replica has applied every write the primary made so far."""
    with redis.Redis(port=primary_port) as primary, redis.Redis(port=replica_port) as copy:
        wanted = primary.info("replication")["master_repl_offset"]
        deadline = time.monotonic() + SYNC_S
        while copy.info("replication").get("slave_repl_offset", -1) < wanted:
            assert time.monotonic() < deadline, "the replica fell behind"
            time.sleep(0.02)


def _same_text(output: str) -> str:
    """The output with the server's address and the time taken left out."""
    return re.sub(r"redis://[^ ]+|\d+\.\d s", "_", output)


async def test_a_read_only_replica_reads_as_its_primary(
        tmp_path: Path, redis_server: RedisServer, replica: RedisServer,
        redis_prefix: str) -> None:
    await checkpointed_thread(redis_server.url, redis_prefix)
    _caught_up(redis_server.port, replica.port)
    (tmp_path / "p").mkdir()
    (tmp_path / "r").mkdir()
    on_primary = redis_config(tmp_path / "p", redis_server.url, redis_prefix)
    on_replica = redis_config(tmp_path / "r", replica.url, redis_prefix)
    for command in COMMANDS:
        expected = cli(*command, "--config", on_primary)
        read = cli(*command, "--config", on_replica)
        assert read.returncode == 0 == expected.returncode, (command, read.stderr)
        assert _same_text(read.stdout) == _same_text(expected.stdout), command
        assert "t1" in read.stdout or "(1 threads, 3 history lines" in read.stdout, command


class Monitor:
    """Every command the server runs meanwhile, as MONITOR reports it."""

    def __init__(self, port: int) -> None:
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self._sock.sendall(b"MONITOR\r\n")
        self._read = self._sock.makefile("rb")
        assert self._read.readline().startswith(b"+OK")
        self._port = port

    def commands(self) -> list[str]:
        """The names of the commands run until now, upper case, with the subcommand of those
        that have one (`SCRIPT LOAD`)."""
        marker = f"end-{time.monotonic_ns()}"
        with redis.Redis(port=self._port) as client:
            client.echo(marker)
        names = []
        for line in iter(self._read.readline, b""):
            text = line.decode("utf-8", "replace")
            if marker in text:
                break
            found = re.search(r'\] "([^"]+)"(?: "([^"]+)")?', text)
            if found:
                name, first = found.group(1).upper(), (found.group(2) or "").upper()
                names.append(f"{name} {first}" if name in _WITH_SUBCOMMANDS else name)
        self._sock.close()
        return names


def _writes(port: int, names: list[str]) -> list[str]:
    """The commands that change the data (flagged `write`) or the server's script cache."""
    with redis.Redis(port=port) as client:
        def flags(name: str) -> list[str]:
            found = client.execute_command("COMMAND", "INFO", name.replace(" ", "|").lower())
            info = next(iter(found.values()), None) if found else None
            return info["flags"] if info else []
        return [name for name in names if "write" in flags(name) or (
            name.split()[0] in _SCRIPTING and name != "SCRIPT EXISTS")]


_SCRIPTING = ("SCRIPT", "EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FUNCTION", "FCALL")


async def test_the_commands_send_no_write_and_load_no_script(
        tmp_path: Path, redis_server: RedisServer, redis_prefix: str,
        raw: aioredis.Redis) -> None:
    await checkpointed_thread(redis_server.url, redis_prefix)
    await raw.script_flush()  # as after a restart: the CLI must not load them again
    config = redis_config(tmp_path, redis_server.url, redis_prefix)
    monitor = Monitor(redis_server.port)
    for command in COMMANDS:
        result = cli(*command, "--config", config)
        assert result.returncode == 0, (command, result.stderr)
    sent = monitor.commands()
    assert "HGETALL" in sent or "EVALSHA" in sent, sent  # the monitor saw the reads
    assert _writes(redis_server.port, sent) == []
    assert not any(await raw.script_exists(*(sha(script) for script in ALL)))


async def test_a_fresh_server_stays_empty(tmp_path: Path, redis_prefix: str) -> None:
    server = started_or_skipped()
    try:
        config = redis_config(tmp_path, server.url, redis_prefix)
        for command in COMMANDS:
            cli(*command, "--config", config)
        with redis.Redis(port=server.port) as client:
            assert client.dbsize() == 0
            assert not any(client.script_exists(*(sha(script) for script in ALL)))
    finally:
        stop_redis_server(server)


async def test_a_thread_is_seen_once_the_version_key_is_gone(
        tmp_path: Path, redis_url: str, redis_prefix: str, raw: aioredis.Redis) -> None:
    await fill(RedisStore(redis_url, prefix=redis_prefix), ["t1", "t2"])
    await raw.delete(RedisKeys(redis_prefix).version)
    config = redis_config(tmp_path, redis_url, redis_prefix)
    listed = cli("threads", "--config", config)
    assert listed.returncode == 0, listed.stderr
    assert "t1" in listed.stdout and "t2" in listed.stdout
    inspected = cli("inspect", "t1", "--config", config)
    assert inspected.returncode == 0, inspected.stderr
    checked = cli("check-state", "--config", config)
    assert checked.returncode == 0, checked.stderr
    assert "(2 threads," in checked.stdout
    assert not await raw.exists(RedisKeys(redis_prefix).version)  # the CLI does not restore it


async def test_a_newer_layout_is_still_refused(tmp_path: Path, redis_url: str,
                                              redis_prefix: str, raw: aioredis.Redis) -> None:
    await fill(RedisStore(redis_url, prefix=redis_prefix), ["t1"])
    await raw.set(RedisKeys(redis_prefix).version, "99")
    config = redis_config(tmp_path, redis_url, redis_prefix)
    for command in COMMANDS:
        result = cli(*command, "--config", config)
        assert result.returncode == 1 and "newer proxy" in result.stderr, (command, result)


async def test_a_read_only_store_refuses_to_write(redis_url: str, redis_prefix: str) -> None:
    from proxy.records import ThreadKey
    from proxy.store import StoreError

    store = RedisStore(redis_url, prefix=redis_prefix, read_only=True)
    await store.open()
    try:
        with pytest.raises(StoreError, match="read-only"):
            store.record_request(ThreadKey("tenant-a", "t1"), 1000.0, 1)
    finally:
        await store.close()


async def test_a_read_only_load_is_the_serving_stores(redis_url: str, redis_prefix: str) -> None:
    from proxy.records import MicrocompactMark, ThreadKey
    from tests.store_backends import anchor
    from tests.test_cli_state_redis import EVENT

    serving = RedisStore(redis_url, prefix=redis_prefix, anchors_kept=3)
    reading = RedisStore(redis_url, prefix=redis_prefix, anchors_kept=3, read_only=True)
    key = ThreadKey("tenant-a", "t1")
    await serving.open()
    await reading.open()
    try:
        serving.record_request(key, 1000.0, 7)
        for n in range(5):
            serving.add_anchor(key, anchor(n, 1001.0 + n))
        await serving.add_event(key, EVENT)
        await serving.set_microcompact(key, MicrocompactMark("m2", 2, 1600.0))
        await serving.flush()
        for wanted in (key, ThreadKey("tenant-a", "none")):
            assert await reading.load(wanted) == await serving.load(wanted)
        assert len((await reading.load(key)).anchors) == 3
    finally:
        await serving.close()
        await reading.close()
