"""The `compaction-proxy` command: config checks, serving, graceful shutdown."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import yaml

from proxy.testing.replies import Reply
from tests.process import ProxyProcess, cli, write_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_config_is_valid() -> None:
    result = cli("check-config", "--config", str(ROOT / "config" / "proxy.yaml"))
    assert result.returncode == 0, result.stderr
    resolved = yaml.safe_load(result.stdout)
    assert resolved["server"]["port"] == 8787
    assert resolved["routes"] == [{"model": "*", "upstream": "openai"}]


def test_check_config_masks_secrets_and_interpolates(tmp_path: Path) -> None:
    config = tmp_path / "proxy.yaml"
    config.write_text("upstreams:\n  main:\n    base_url: ${BASE:-http://127.0.0.1:9/v1}\n"
                      "    api_key: sk-live-abcdefghijklmnopqrstuvwxyz\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert "abcdefghijklmnopqrstuvwxyz" not in result.stdout
    assert yaml.safe_load(result.stdout)["upstreams"]["main"]["base_url"] == "http://127.0.0.1:9/v1"


def test_a_bad_config_exits_1_naming_each_key_and_problem(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("server:\n  port: eighty\n  prot: 1\nupstreams:\n  u:\n    base_url: ftp://x\n"
                      "routes:\n  - model: '*'\n    upstream: nowhere\n"
                      "compaction:\n  trigger_ratio: 2\n  api_key: ${MISSING_VAR}\n")
    for command in ("check-config", "serve"):
        result = cli(command, "--config", str(config))
        assert result.returncode == 1
        for fragment in ("server.port: expected an integer", "server.prot: unknown key",
                         "upstreams.u.base_url: must be an http(s) URL",
                         "routes[0].upstream: no upstream named 'nowhere'",
                         "compaction.trigger_ratio: must be at most 1.0",
                         "compaction.api_key: environment variable MISSING_VAR is not set"):
            assert fragment in result.stderr, (command, fragment, result.stderr)


def test_a_missing_config_file_is_reported(tmp_path: Path) -> None:
    result = cli("serve", "--config", str(tmp_path / "absent.yaml"))
    assert result.returncode == 1 and "cannot read" in result.stderr


def test_sigterm_lets_an_inflight_stream_finish(tmp_path: Path, make_fake, make_client) -> None:
    fake = make_fake(chunk_delay=0.05)
    fake.script(Reply.text(" ".join(f"word{i}" for i in range(40))))
    proxy = ProxyProcess(write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state"))
    try:
        client = make_client(proxy.base_url, "sk-x")
        stream = client.chat.completions.create(model="gpt-4o", stream=True,
                                                messages=[{"role": "user", "content": "go"}])
        chunks = iter(stream)
        first = next(chunks)
        threading.Timer(0.1, proxy.signal, (signal.SIGTERM,)).start()
        text = (first.choices[0].delta.content or "") + "".join(
            c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.split() == [f"word{i}" for i in range(40)]
        assert proxy.wait() == 0
        assert proxy.events("shutting_down") and proxy.events("stopped")
    finally:
        proxy.kill()


def test_serve_flags_override_the_file(tmp_path: Path, fake) -> None:
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          server={"port": 1})  # port 1 would fail: the flag must win
    proxy = ProxyProcess(config, "--port", "0", "--host", "127.0.0.1")
    try:
        assert proxy.port not in (0, 1)
        assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz").status_code == 200
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()
