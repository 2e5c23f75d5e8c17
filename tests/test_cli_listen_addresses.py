"""How `serve` names the address it listens on, or could not listen on: an IPv6 address in
brackets (`::1:8787` reads as an address and no port), written either way by the user, and a
port in use said once, not as the operating system's tuple."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import httpx
import pytest
import yaml

from tests.process import ProxyProcess, cli, write_config


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
        return True
    except OSError:
        return False


ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")


def _stderr_line(result) -> str:  # type: ignore[no-untyped-def]
    assert result.returncode == 1, result.stderr
    [line] = result.stderr.splitlines()
    return line


@ipv6
@pytest.mark.parametrize("host", ["::1", "[::1]"])
def test_an_ipv6_listen_address_is_shown_in_brackets(tmp_path: Path, host: str) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    proxy = ProxyProcess(config, "--host", host, "--port", "0")
    try:
        [listening] = proxy.events("listening")
        assert listening["addresses"] == [f"[::1]:{proxy.port}"]
        assert httpx.get(f"http://[::1]:{proxy.port}/healthz").status_code == 200
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()


@ipv6
def test_a_bracketed_ipv6_host_in_the_file_is_the_address_it_brackets(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state",
                          server={"host": "[::1]"})
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["server"]["host"] == "::1"


@ipv6
def test_an_ipv6_port_in_use_is_one_line_naming_the_address_in_brackets(tmp_path: Path) -> None:
    with socket.socket(socket.AF_INET6) as taken:
        taken.bind(("::1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
        line = _stderr_line(cli("serve", "--config", str(config), "--host", "::1",
                                "--port", str(port)))
    assert line.startswith(f"compaction-proxy: cannot listen on [::1]:{port}: "
                           "Address already in use ("), line


def test_a_port_in_use_is_said_once_not_as_the_bind_tuple(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
        line = _stderr_line(cli("serve", "--config", str(config), "--port", str(port)))
    assert line == (f"compaction-proxy: cannot listen on 127.0.0.1:{port}: Address already in "
                    f"use (server.host/server.port in {config}, or --host/--port)")


@pytest.mark.parametrize("host", ["[]", "[ ]"])
def test_empty_brackets_are_an_empty_host(tmp_path: Path, host: str) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    result = cli("serve", "--config", str(config), "--host", host)
    assert result.returncode == 2 and "argument --host: must not be empty" in result.stderr
