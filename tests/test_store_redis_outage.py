"""A Redis server that stops while the proxy runs, and one that never answered: the failures are
counted and logged without the password, and the store serves again once a server is back."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from proxy.store import FailureHooks, StoreError
from proxy.store.redis_store import RedisStore
from tests.redis_server import RedisServer, started_or_skipped, stop_redis_server
from tests.store_backends import KEY, LogLines, anchor, event

PASSWORD = "s3cret-pass-word"


@pytest.fixture
def own_server() -> Iterator[RedisServer]:
    """A server of this test alone (it will be stopped), its password set."""
    server = started_or_skipped()
    admin = redis.Redis(port=server.port)
    admin.config_set("requirepass", PASSWORD)
    admin.close()
    yield server
    stop_redis_server(server)


def restarted(server: RedisServer) -> subprocess.Popen[bytes]:
    """A fresh server (no data, no scripts) on the stopped one's port, with its password."""
    process = subprocess.Popen(
        ["redis-server", "--port", str(server.port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(server.directory), "--requirepass", PASSWORD],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=server.port, password=PASSWORD, socket_timeout=0.5)
    try:
        for _ in range(500):
            try:
                if client.ping():
                    return process
            except redis.ConnectionError:
                time.sleep(0.01)
    finally:
        client.close()
    process.kill()
    process.wait()
    raise RuntimeError("redis-server did not come back")


async def test_a_stopped_server_loses_queued_writes_counted_and_serves_again_once_back(
        own_server: RedisServer) -> None:
    lost: list[int] = []
    log = LogLines()
    url = f"redis://:{PASSWORD}@127.0.0.1:{own_server.port}/0"
    store = RedisStore(url, prefix="cp:", timeout_s=1.0, log=log,
                       hooks=FailureHooks(writes_lost=lost.append))
    await store.open()
    back = None
    try:
        store.add_anchor(KEY, anchor(1))
        await store.flush()
        stop_redis_server(own_server, keep_directory=True)
        for n in range(20):
            store.record_request(KEY, 1000.0 + n, n)
            store.add_anchor(KEY, anchor(n))
        await store.flush()
        assert sum(lost) == 40 and store.writer.failed == 40
        [line] = log.named("state_write_failed")  # once, rate-limited
        assert line["failed"] >= 1 and PASSWORD not in repr(line)
        with pytest.raises(StoreError) as raised:
            await store.load(KEY)
        text = str(raised.value)
        assert PASSWORD not in text and "redis://:***@127.0.0.1" in text
        assert PASSWORD not in repr(raised.value.body())  # type: ignore[attr-defined]
        with pytest.raises(StoreError):
            await store.add_event(KEY, event(1))
        assert sum(lost) == 41  # an awaited write: raised and counted
        assert PASSWORD not in repr(log.lines)

        back = restarted(own_server)  # empty: its data and scripts are gone
        store.add_anchor(KEY, anchor(7))  # the scripts are loaded again
        assert (await store.load(KEY)).anchors == (anchor(7),)
        assert (await store.add_event(KEY, event(1))).seq == 1
        assert sum(lost) == 41
    finally:
        await store.close()
        if back is not None:
            back.terminate()
            back.wait()


async def test_an_unreachable_server_fails_open_naming_it_without_the_password(
        own_server: RedisServer) -> None:
    port = own_server.port
    stop_redis_server(own_server, keep_directory=True)
    store = RedisStore(f"redis://user:{PASSWORD}@127.0.0.1:{port}/0", timeout_s=0.5)
    with pytest.raises(StoreError) as raised:
        await store.open()
    text = str(raised.value)
    assert text.startswith(f"cannot reach Redis at redis://user:***@127.0.0.1:{port}/0: ")
    assert PASSWORD not in text
    with pytest.raises(StoreError):
        await store.load(KEY)  # never opened


async def test_a_wrong_password_fails_open_without_showing_it(
        own_server: RedisServer) -> None:
    store = RedisStore(f"redis://:wrong-{PASSWORD}@127.0.0.1:{own_server.port}/0")
    with pytest.raises(StoreError) as raised:
        await store.open()
    assert PASSWORD not in str(raised.value) and "cannot reach Redis at" in str(raised.value)
