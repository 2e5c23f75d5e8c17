"""`compaction-proxy serve` with a config that validates but cannot start: exit 1 within a
few seconds, one stderr line, and one `startup_failed` log line (ERROR, the same words), no
traceback anywhere. Real processes: the CLI, and a running proxy that owns the state."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

from tests.process import ProxyProcess, cli, write_config

UPSTREAM = "http://127.0.0.1:9/v1"


def _refused_start(*args: str) -> tuple[str, dict[str, Any]]:
    """The stderr line and the `startup_failed` log line of a start that failed at once."""
    began = time.monotonic()
    result: subprocess.CompletedProcess[str] = cli("serve", *args)
    took = time.monotonic() - began
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert took < 10, took  # the interpreter's start and the imports: about a second
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "Logging error" not in output, output
    lines = [orjson.loads(line) for line in result.stdout.splitlines()]
    [failed] = [line for line in lines if line["event"] == "startup_failed"]
    assert failed["level"] == "error"
    # Nothing else went wrong on the way out (an upstream session left unclosed, say).
    others = [line for line in lines if line["event"] != "startup_failed"]
    assert all(line["level"] == "info" and line["event"] != "listening" for line in others), others
    [stderr_line] = result.stderr.strip().splitlines()
    return stderr_line, failed


def test_a_port_in_use_is_startup_failed_in_the_log_and_on_stderr(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "p.yaml", UPSTREAM, tmp_path / "state")
        stderr_line, failed = _refused_start("--config", str(config), "--port", str(port))
    problem = f"cannot listen on 127.0.0.1:{port}: Address already in use"
    assert failed["error"] == problem
    assert stderr_line == (f"compaction-proxy: {problem} "
                           f"(server.host/server.port in {config}, or --host/--port)")


def test_a_state_another_running_proxy_owns_is_startup_failed_naming_its_pid(
        tmp_path: Path) -> None:
    state = tmp_path / "state"
    owner = ProxyProcess(write_config(tmp_path / "owner.yaml", UPSTREAM, state))
    try:
        config = write_config(tmp_path / "second.yaml", UPSTREAM, state)
        stderr_line, failed = _refused_start("--config", str(config))
        assert owner.process.poll() is None  # the owner serves on, untouched
    finally:
        owner.kill()
    pid = owner.process.pid
    assert failed["error"].startswith(f"cannot open the state in {state}: ")
    assert f"another proxy process (pid {pid}) holds {state / 'state.lock'}" in failed["error"]
    assert stderr_line == f"compaction-proxy: {failed['error']} (state.path in {config})"


def test_a_host_name_the_resolver_cannot_encode_is_startup_failed_not_a_traceback(
        tmp_path: Path) -> None:
    # An empty label (a doubled dot) or one over 63 characters: Python's IDNA codec refuses it
    # before any lookup, with a UnicodeError, not the OSError of a name that is not found.
    config = write_config(tmp_path / "p.yaml", UPSTREAM, tmp_path / "state")
    for host in ("proxy..internal", "h" * 64):
        stderr_line, failed = _refused_start("--config", str(config), "--host", host)
        problem = f"cannot listen on {host}:0: not a valid host name (label "
        assert failed["error"].startswith(problem), failed
        assert stderr_line == (f"compaction-proxy: {failed['error']} "
                               f"(server.host/server.port in {config}, or --host/--port)")
