"""`state.backend: redis` at start: the package missing, the server unreachable, or serving;
never the server's password in what the operator sees."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from proxy.records import MicrocompactMark, ThreadKey
from proxy.settings import RedisSettings, StateSettings
from proxy.store import StoreError, create_store
from tests.process import ProxyProcess, child_env, write_config

UPSTREAM = "http://127.0.0.1:9/v1"
PASSWORD = "hunter2-secret-pw"
KEY, MARK = ThreadKey("tenant", "thread"), MicrocompactMark("m1", 3, 10.0)
WITHOUT_REDIS = "import sys\nsys.modules['redis'] = None  # as if not installed\n"


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _redis_config(tmp_path: Path, url: str, prefix: str = "cp:") -> Path:
    return write_config(tmp_path / "p.yaml", UPSTREAM, tmp_path / "state",
                        state={"backend": "redis",
                               "redis": {"url": url, "prefix": prefix, "timeout_s": 1}})


def _serve(config: Path, prelude: str = "") -> subprocess.CompletedProcess[str]:
    code = prelude + "from proxy.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"
    return subprocess.run([sys.executable, "-c", "import sys\n" + code, "serve", "--config",
                           str(config)], capture_output=True, text=True, timeout=60,
                          env=child_env())


def _startup_failed(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """The `startup_failed` line's error and the stderr line of a start that failed."""
    assert result.returncode == 1, (result.stdout, result.stderr)
    output = result.stdout + result.stderr
    assert "Traceback" not in output and PASSWORD not in output, output
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    [failed] = [line for line in lines if line["event"] == "startup_failed"]
    [stderr_line] = result.stderr.strip().splitlines()
    return failed["error"], stderr_line


def test_serve_against_an_unreachable_redis_is_startup_failed_without_the_password(
        tmp_path: Path) -> None:
    port = _closed_port()
    config = _redis_config(tmp_path, f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    began = time.monotonic()
    error, stderr_line = _startup_failed(_serve(config))
    assert time.monotonic() - began < 15
    assert error.startswith(f"cannot open the state: cannot reach Redis at "
                            f"redis://:***@127.0.0.1:{port}/0: ConnectionError: "), error
    assert stderr_line == f"compaction-proxy: {error} (state.redis in {config})"


def test_serve_without_the_redis_package_says_what_to_install(tmp_path: Path) -> None:
    port = _closed_port()
    config = _redis_config(tmp_path, f"redis://:{PASSWORD}@127.0.0.1:{port}/0")
    error, _ = _startup_failed(_serve(config, WITHOUT_REDIS))
    assert error == (f"cannot open the state in Redis at redis://:***@127.0.0.1:{port}/0: "
                     "state.backend redis needs the redis package: "
                     "pip install 'compaction-proxy[redis]'")


def test_create_store_without_the_redis_package_says_what_to_install(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)
    monkeypatch.delitem(sys.modules, "proxy.store.redis_store", raising=False)
    with pytest.raises(StoreError, match=r"pip install 'compaction-proxy\[redis\]'"):
        create_store(StateSettings(backend="redis"))


async def test_create_store_builds_the_configured_redis_store(redis_url: str,
                                                              redis_prefix: str) -> None:
    store = create_store(StateSettings(backend="redis", redis=RedisSettings(
        url=redis_url, prefix=redis_prefix, timeout_s=2.0, lease_s=7.0)))
    assert store.shared
    await store.open()
    try:
        await store.set_microcompact(KEY, MARK)
        assert (await store.load(KEY)).microcompact == MARK
    finally:
        await store.close()


def test_a_proxy_serves_on_redis_and_logs_where_masked(tmp_path: Path, redis_url: str,
                                                       redis_prefix: str) -> None:
    # The test server sets no password, and then takes any: the URL carries one all the same.
    url = redis_url.replace("redis://", f"redis://default:{PASSWORD}@")
    proxy = ProxyProcess(_redis_config(tmp_path, url, redis_prefix))
    try:
        [listening] = proxy.events("listening")
        assert listening["state_redis"] == url.replace(PASSWORD, "***")
        assert "state_path" not in listening
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
    finally:
        proxy.kill()
    assert PASSWORD not in b"".join(proxy.raw).decode()

