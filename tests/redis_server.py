"""A real Redis server for the tests of the Redis state backend, started by the tests.

One `redis-server` per test process (xdist worker), on a free loopback port, in a temporary
directory, with persistence off; each test gets a key prefix of its own (`redis_prefix`), so
tests share the server without seeing each other's keys and nothing needs flushing.

Without the `redis-server` program (a fresh machine), the tests that need it are skipped;
`.ci/run` installs it and sets `COMPACTION_PROXY_REQUIRE_REDIS=1`, which turns that skip into a
failure, so CI cannot pass by skipping them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

REQUIRE_ENV = "COMPACTION_PROXY_REQUIRE_REDIS"
STARTUP_S = 20.0


@dataclass(frozen=True)
class RedisServer:
    url: str
    port: int
    process: subprocess.Popen[bytes]
    directory: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def start_redis_server() -> RedisServer:
    """A fresh server on a free port; raises RuntimeError when it does not come up."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise FileNotFoundError("redis-server")
    directory = Path(tempfile.mkdtemp(prefix="cp-redis-"))
    for _ in range(3):  # a port taken between the probe and the bind: try another
        port = _free_port()
        process = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory), "--protected-mode", "yes",
             "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + STARTUP_S
        while time.monotonic() < deadline and process.poll() is None:
            if _answers_ping(port):
                return RedisServer(f"redis://127.0.0.1:{port}/0", port, process, directory)
            time.sleep(0.02)
        stop_redis_server(RedisServer("", port, process, directory), keep_directory=True)
    shutil.rmtree(directory, ignore_errors=True)
    raise RuntimeError("redis-server did not start")


def stop_redis_server(server: RedisServer, keep_directory: bool = False) -> None:
    server.process.terminate()
    try:
        server.process.wait(10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()
    if server.process.stderr is not None:
        server.process.stderr.close()
    if not keep_directory:
        shutil.rmtree(server.directory, ignore_errors=True)


def started_or_skipped() -> RedisServer:
    """A fresh server; without the program, the test is skipped (failed under REQUIRE_ENV)."""
    try:
        return start_redis_server()
    except FileNotFoundError:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but no redis-server on PATH")
        pytest.skip("no redis-server on PATH (install Redis to run these tests)")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = started_or_skipped()
    yield server
    stop_redis_server(server)


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    return redis_server.url


@pytest.fixture
def redis_prefix() -> str:
    """Keys of this test alone, on the shared server."""
    return f"cp-test:{uuid.uuid4().hex[:12]}:"
