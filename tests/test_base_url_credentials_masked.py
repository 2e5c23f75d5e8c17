"""A key in an upstream's base_url is masked wherever the URL is shown (check-config, the
listening line, an error text that quotes it): in its userinfo, its query or its path, where
some gateways take it (`/v1/<key>/...`, `/key/<key>/`). Ordinary path words stay readable,
and the upstream still gets the real URL."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx
import pytest
import yaml

from proxy.redaction import redact
from proxy.settings import redacted_url
from tests.conftest import API_KEY
from tests.process import ProxyProcess, cli, write_config
from tests.test_server_wire_edges import CHAT, make_upstream  # noqa: F401 - the fixture
from tests.test_upstream_base_url_query import _ok, garbled_upstream  # noqa: F401 - the fixture

PATH_KEY = "sk-proj-PATHsecret0123456789"
HEX_KEY = "9f86d081884c7d659a2feaa0c55ad015"


@pytest.mark.parametrize("url, shown", [
    ("https://user:s3cret@h/v1", "https://user:***@h/v1"),
    ("https://sk-abcdefghijk123@h/v1", "https://***@h/v1"),  # a key as the user name
    ("https://gw.example/v1/sk-proj-abcDEF1234567890xyz/openai", "https://gw.example/v1/***/openai"),
    ("https://gw.example/key/abc123/v1", "https://gw.example/key/***/v1"),
    ("https://gw.example/v1/apikey/short", "https://gw.example/v1/apikey/***"),
    ("https://gw.example/v1/Token/t0k/chat", "https://gw.example/v1/Token/***/chat"),
    (f"https://gw.example/v1/{HEX_KEY}/my-gateway/openai", "https://gw.example/v1/***/my-gateway/openai"),
    ("https://gw.example/AIzaSyA1234567890abcdefghij/v1", "https://gw.example/***/v1"),
    ("https://gw.example/v1/aB3dE6gH9jK2mN5pQ8sT/x", "https://gw.example/v1/***/x"),  # base62
    ("https://gw.example/v1/sk-proj-abc%2Fdef0123456789/x", "https://gw.example/v1/***/x"),
    ("https://u:p@gw.example/key/k1/v1?key=q#top", "https://u:***@gw.example/key/***/v1?key=***#top"),
], ids=["password", "key as user name", "sk- segment", "after key", "after apikey",
        "after Token", "hex", "AIza", "base62", "escaped", "all at once"])
def test_a_credential_in_a_base_url_is_masked(url: str, shown: str) -> None:
    assert redacted_url(url) == shown


@pytest.mark.parametrize("url", [
    "https://api.openai.com/v1",
    "https://res.openai.azure.com/openai/deployments/gpt-4o",
    "https://h/openai/deployments/gpt-4o-mini-2024-07-18",
    "https://h/v1/Meta-Llama-3.1-70B-Instruct",
    "https://generativelanguage.googleapis.com/v1beta/openai",
    "https://api.deepseek.com/v1",
    "https://openrouter.ai/api/v1",
    "http://user@h/v1",
    "http://h:8080/v1/a@b",
    "http://127.0.0.1:11434/v1",
])
def test_ordinary_path_words_are_shown(url: str) -> None:
    assert redacted_url(url) == url


def test_an_error_text_quoting_a_base_url_loses_its_credentials() -> None:
    text = f"Cannot connect: url='https://u:LEAKpw@gw.example/v1/{HEX_KEY}/key/LEAK1/x?k=LEAK2'."
    assert redact(text) == "Cannot connect: url='https://u:***@gw.example/v1/***/key/***/x?k=***'."


def test_check_config_masks_a_key_in_the_base_url_path(tmp_path: Path) -> None:
    config = tmp_path / "path.yaml"
    config.write_text(f"upstreams:\n  g:\n    base_url: https://gw.example/v1/{HEX_KEY}/openai\n")
    result = cli("check-config", "--config", str(config))
    assert result.returncode == 0, result.stderr
    assert HEX_KEY not in result.stdout
    assert yaml.safe_load(result.stdout)["upstreams"]["g"]["base_url"] == "https://gw.example/v1/***/openai"


def test_the_listening_line_masks_a_key_in_the_base_url_path(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", f"http://127.0.0.1:9/v1/key/{PATH_KEY}",
                          tmp_path / "state")
    proxy = ProxyProcess(config)
    try:
        [listening] = proxy.events("listening")
        assert listening["upstreams"] == {"fake": "http://127.0.0.1:9/v1/key/***"}
        assert PATH_KEY.encode() not in b"".join(proxy.raw)
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()


def test_the_upstream_gets_the_real_path_key(make_upstream, make_proxy) -> None:  # noqa: F811
    upstream = make_upstream(_ok)
    proxy = make_proxy(f"{upstream.url}/key/{PATH_KEY}")
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT,
                        headers={"Authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 200
    assert [path for _, path, _, _ in upstream.seen] == [
        f"/tenant-a/v1/key/{PATH_KEY}/chat/completions"]
    assert PATH_KEY not in proxy.logs.text


def test_a_garbled_answer_names_no_path_key(make_proxy, garbled_upstream) -> None:  # noqa: F811
    proxy = make_proxy(f"{garbled_upstream}/key/{PATH_KEY}")
    answer = httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT,
                        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert answer.status_code == 502
    assert PATH_KEY not in answer.text and PATH_KEY not in proxy.logs.text
