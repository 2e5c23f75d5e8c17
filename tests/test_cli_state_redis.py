"""`threads`, `inspect` and `check-state` with `state.backend: redis`: the SQLite output, read
only (nothing written, not even the layout version), damage reported, the server's
persistence warned about, an unreachable server named without its password."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from proxy.records import CompactionEvent, ThreadKey
from proxy.settings import RedisSettings
from proxy.store import SqliteStore, StateStore
from proxy.store.keys import thread_key_text
from proxy.store.redis_history import RedisHistory
from proxy.store.redis_keys import RedisKeys, thread_digest
from proxy.store.redis_store import RedisStore
from tests.process import cli, write_config
from tests.redis_fixtures import redis_client as raw  # noqa: F401
from tests.redis_server import start_redis_server, stop_redis_server
from tests.test_cli_state import IDS, assert_one_line_error, listed_ids

EVENT = CompactionEvent(3, "m3", "v1:d", {"role": "user", "content": "summary \ud800"},
                        created_at=1500.0)


def redis_config(tmp_path: Path, url: str, prefix: str) -> str:
    return str(write_config(tmp_path / "redis.yaml", "http://127.0.0.1:9/v1", tmp_path / "unused",
                            state={"backend": "redis", "redis": {"url": url, "prefix": prefix}}))


async def fill(store: StateStore, ids: list[str] = IDS) -> None:
    await store.open()
    try:
        for n, thread in enumerate(ids):
            store.record_request(ThreadKey("tenant-a", thread), 1000.0 + n, 100 + n)
        await store.flush()
        await store.add_event(ThreadKey("tenant-a", ids[0]), EVENT)
    finally:
        await store.close()


async def snapshot(raw: aioredis.Redis, prefix: str) -> dict[bytes, bytes]:
    """Every key under the prefix with its serialized value."""
    return {key: await raw.dump(key) async for key in raw.scan_iter(match=prefix + "*")}


async def test_the_output_is_the_sqlite_stores(tmp_path: Path, redis_url: str,
                                                redis_prefix: str) -> None:
    await fill(SqliteStore(tmp_path / "state"))
    await fill(RedisStore(redis_url, prefix=redis_prefix))
    on_sqlite = str(write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state"))
    on_redis = redis_config(tmp_path, redis_url, redis_prefix)
    listed = cli("threads", "--config", on_redis)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout == cli("threads", "--config", on_sqlite).stdout
    assert sorted(listed_ids(listed.stdout)) == sorted(thread_key_text(i) for i in IDS)
    for thread in listed_ids(listed.stdout):
        inspected = cli("inspect", thread, "--config", on_redis)
        assert inspected.returncode == 0, (thread, inspected.stderr)
        assert inspected.stdout == cli("inspect", thread, "--config", on_sqlite).stdout
        assert json.loads(inspected.stdout)[0]["key"]["thread"] == thread


async def test_the_commands_write_nothing(tmp_path: Path, redis_url: str, redis_prefix: str,
                                          raw: aioredis.Redis) -> None:
    config = redis_config(tmp_path, redis_url, redis_prefix)
    for command in (["threads"], ["inspect", "t1"], ["check-state"]):  # nothing there yet
        result = cli(*command, "--config", config)
        assert result.returncode == (1 if command[0] == "inspect" else 0), result.stderr
    assert await snapshot(raw, redis_prefix) == {}, "not even the layout version"
    assert "no threads in redis" in cli("threads", "--config", config).stdout
    await fill(RedisStore(redis_url, prefix=redis_prefix), ["t1", "t2"])
    before = await snapshot(raw, redis_prefix)
    for command in (["threads"], ["inspect", "t1"], ["check-state"]):
        assert cli(*command, "--config", config).returncode == 0
    assert await snapshot(raw, redis_prefix) == before
    assert not (tmp_path / "unused").exists()


def test_an_unreachable_server_is_one_line_naming_it_without_its_password(
        tmp_path: Path) -> None:
    server = start_redis_server()
    stop_redis_server(server)  # nobody listens on its port now
    url = f"redis://user:s3cret-pw@127.0.0.1:{server.port}/0"
    config = redis_config(tmp_path, url, "p:")
    for command in (["threads"], ["inspect", "t1"], ["check-state"]):
        result = cli(*command, "--config", config)
        assert_one_line_error(result, f"127.0.0.1:{server.port}", "***")
        assert "s3cret-pw" not in result.stderr + result.stdout


async def checkpointed_thread(redis_url: str, redis_prefix: str) -> str:
    """A thread with 3 history lines and a checkpoint that accounts for them; its list's
    `history_file`."""
    store = RedisStore(redis_url, prefix=redis_prefix)
    history = RedisHistory(RedisSettings(url=redis_url, prefix=redis_prefix))
    await history.open()
    key = ThreadKey("tenant-a", "t1")
    appended = await history.offload_async(key, [{"role": "user", "content": "hello"}] * 3)
    await history.close()
    await store.open()
    store.record_request(key, 1000.0, 10)
    await store.add_event(key, CompactionEvent(3, "m3", "v1:d", {"role": "user", "content": "s"},
                                               history_file=appended.path, history_end=3))
    await store.close()
    return appended.path


async def test_check_state_decodes_every_record_and_history_line(
        tmp_path: Path, redis_url: str, redis_prefix: str, raw: aioredis.Redis) -> None:
    path = await checkpointed_thread(redis_url, redis_prefix)
    config = redis_config(tmp_path, redis_url, redis_prefix)

    sound = cli("check-state", "--config", config)
    assert sound.returncode == 0, sound.stderr
    assert sound.stdout.startswith("ok: redis ") and "1 threads, 3 history lines" in sound.stdout

    await raw.rpush(path.removeprefix("redis:"), b'{"seq": 4, "at"')
    torn = cli("check-state", "--config", config)
    assert torn.returncode == 1 and "history line(s) do not decode (lines 4)" in torn.stdout

    events = RedisKeys(redis_prefix).events(thread_digest(ThreadKey("tenant-a", "t1")))
    await raw.rpush(events, b"{not json")
    damaged = cli("check-state", "--config", config)
    assert damaged.returncode == 1, damaged.stdout
    assert "thread 't1'" in damaged.stdout and "checkpoint" in damaged.stdout
    assert "damaged" in damaged.stderr and "{not json" not in damaged.stdout + damaged.stderr


def test_check_state_warns_when_the_server_would_lose_checkpoints(
        tmp_path: Path, redis_url: str, redis_prefix: str) -> None:
    # The tests' server keeps nothing on disk.
    result = cli("check-state", "--config", redis_config(tmp_path, redis_url, redis_prefix))
    assert result.returncode == 0, result.stderr
    assert "warning: the Redis server keeps nothing on disk" in result.stderr
    assert "appendonly no, save none" in result.stdout


def test_check_state_is_quiet_about_an_append_only_server(tmp_path: Path) -> None:
    server = start_redis_server()
    try:
        subprocess.run(["redis-cli", "-p", str(server.port), "config", "set", "appendonly",
                        "yes"], check=True, capture_output=True)
        result = cli("check-state", "--config", redis_config(tmp_path, server.url, "p:"))
    finally:
        stop_redis_server(server)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "" and "appendonly yes" in result.stdout


@pytest.mark.parametrize("refused", [["-config"], ["-config", "-info"]])
def test_check_state_reads_what_persistence_it_may(tmp_path: Path, refused: list[str]) -> None:
    # A managed server's user often may not run CONFIG; INFO then says whether AOF is on.
    server = start_redis_server()
    try:
        subprocess.run(["redis-cli", "-p", str(server.port), "acl", "setuser", "reader", "on",
                        ">pw-x9", "~*", "+@all", *refused], check=True, capture_output=True)
        url = f"redis://reader:pw-x9@127.0.0.1:{server.port}/0"
        result = cli("check-state", "--config", redis_config(tmp_path, url, "p:"))
    finally:
        stop_redis_server(server)
    assert result.returncode == 0, result.stderr
    if refused == ["-config"]:
        assert "runs with appendonly no" in result.stderr
        assert "appendonly no, save unknown" in result.stdout
    else:
        assert "persistence could not be read" in result.stderr
        assert "appendonly unknown, save unknown" in result.stdout
    assert "pw-x9" not in result.stdout + result.stderr


async def test_check_state_reports_checkpoint_lines_missing_from_the_history_list(
        tmp_path: Path, redis_url: str, redis_prefix: str, raw: aioredis.Redis) -> None:
    # What a retract after a checkpoint that did commit left (a lost answer, a lost lease).
    path = await checkpointed_thread(redis_url, redis_prefix)
    config = redis_config(tmp_path, redis_url, redis_prefix)
    assert cli("check-state", "--config", config).returncode == 0

    await raw.ltrim(path.removeprefix("redis:"), 0, 0)
    cut = cli("check-state", "--config", config)
    assert cut.returncode == 1, cut.stdout
    assert "checkpoint 1 accounts for 3 history lines" in cut.stdout and "holds 1" in cut.stdout
