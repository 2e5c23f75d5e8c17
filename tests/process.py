"""The proxy as a real process (`python -m proxy serve`), for signal, restart and CLI tests."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import yaml


def write_config(path: Path, upstream_url: str | Mapping[str, str], state_path: Path,
                 **sections: Any) -> Path:
    """A config file: the upstream `fake` at `upstream_url` (or one upstream per name of a
    mapping of names to URLs), state in `state_path`, `sections` over the defaults."""
    urls = {"fake": upstream_url} if isinstance(upstream_url, str) else upstream_url
    config: dict[str, Any] = {
        "server": {"host": "127.0.0.1", "port": 0, "shutdown_grace_s": 10},
        "upstreams": {name: {"base_url": url, "timeout_s": 20} for name, url in urls.items()},
        "state": {"path": str(state_path)},
        "logging": {"format": "json", "level": "info"},
    }
    for name, value in sections.items():  # a mapping merged into the default; a list replaces
        config[name] = {**config.get(name, {}), **value} if isinstance(value, dict) else value
    path.write_text(yaml.safe_dump(config))
    return path


def cli(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "proxy", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env=child_env())


def child_env() -> dict[str, str]:
    """The environment a child needs to import this checkout's `proxy`."""
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}


_RUN_MAIN = "\nimport sys\nfrom proxy.__main__ import main\nsys.exit(main(sys.argv[1:]))\n"


class ProxyProcess:
    """`compaction-proxy serve` in a child process; its JSON log lines are collected."""

    def __init__(self, config: Path, *args: str, prelude: str | None = None) -> None:
        """`prelude`: Python run in the child before the command (a test's patch), if any."""
        command = ["-m", "proxy"] if prelude is None else ["-c", prelude + _RUN_MAIN]
        self.process = subprocess.Popen([sys.executable, *command, "serve", "--config",
                                         str(config), *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, env=child_env())
        self.lines: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self._ready = threading.Event()
        self.port = 0
        threading.Thread(target=self._read, daemon=True).start()
        if not self._ready.wait(30):
            self.kill()
            raise RuntimeError("the proxy did not start:\n" + b"".join(self.raw).decode(errors="replace"))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.raw.append(line)
            try:
                event = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            self.lines.append(event)
            if event.get("event") == "listening":
                self.port = int(event["addresses"][0].rsplit(":", 1)[1])
                self._ready.set()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def signal(self, signum: int) -> None:
        self.process.send_signal(signum)

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        if self.process.stdout is not None:
            self.process.stdout.close()

    def wait(self, timeout: float = 20) -> int:
        return self.process.wait(timeout)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    def wait_for(self, name: str, count: int = 1, timeout: float = 10) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.events(name)
            if len(found) >= count:
                return found
            time.sleep(0.02)
        raise TimeoutError(f"no {count} {name!r} log lines")


def assert_sound_database(path: Path) -> None:
    """The state database at `path` passes SQLite's own integrity check."""
    database = sqlite3.connect(path)
    try:
        assert database.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        database.close()


def kill_script(script: str, args: list[str], ready: bytes, delay: float, *,
                alive: bool = True) -> None:
    """Run `script` (`python -c`, the repository importable) with `args`, wait for its line
    `ready`, let it go on for `delay` seconds, then SIGKILL it: a kill at a chosen instant of
    its work. `alive`: it must still be running when killed (it loops until killed)."""
    repo = Path(__file__).resolve().parents[1]
    child = subprocess.Popen([sys.executable, "-c", script, *args], cwd=repo,
                             env={**os.environ, "PYTHONPATH": str(repo)},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == ready, \
            child.communicate()[1].decode()
        time.sleep(delay)
        assert not alive or child.poll() is None, child.communicate()[1].decode()
    finally:
        child.send_signal(signal.SIGKILL)
        child.communicate()
    assert not alive or child.returncode == -signal.SIGKILL


def proxy_command(*args: str, prelude: str | None = None) -> list[str]:
    """`python -m proxy ARGS`, with `prelude` (a test's patch) run first if given: for a test
    that drives the child itself (with `child_env()`), not through `ProxyProcess`."""
    command = ["-m", "proxy"] if prelude is None else ["-c", prelude + _RUN_MAIN]
    return [sys.executable, *command, *args]
