"""A request to a path the proxy does not serve (a client whose base URL lacks `/v1`, a POST to
`/healthz`) is answered by the proxy itself: it still ends in one `request` line and one count
in `proxy_requests_total`, under `kind="other"`, so the operator sees the misconfigured client."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import API_KEY


def _requests_total(proxy) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    return {(s.labels["kind"], s.labels["status"]): s.value
            for family in text_string_to_metric_families(text) if family.name == "proxy_requests"
            for s in family.samples if s.name == "proxy_requests_total"}


@pytest.mark.parametrize("method, path, status, code", [
    ("POST", "/chat/completions", 404, "not_found"),  # the base URL without /v1
    ("GET", "/", 404, "not_found"),
    ("POST", "/healthz", 405, "method_not_allowed"),
    ("DELETE", "/metrics", 405, "method_not_allowed"),
])
def test_a_path_the_proxy_does_not_serve_ends_in_one_line_and_one_count(
        fake, proxy, method: str, path: str, status: int, code: str) -> None:
    answer = httpx.request(method, f"{proxy.url}{path}", json={"model": "gpt-4o"}, timeout=10,
                           headers={"authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == status
    assert answer.json()["error"]["code"] == code
    [line] = proxy.requests()
    assert line["status"] == status and line["error"] == code
    assert line["path"] == path and line["method"] == method and line["tenant"]
    assert "duration_ms" in line
    assert API_KEY not in proxy.logs.text
    assert _requests_total(proxy) == {("other", str(status)): 1.0}
    assert not fake.requests


def test_the_probes_and_scrapes_write_no_request_line(fake, proxy) -> None:
    for _ in range(3):
        assert httpx.get(f"{proxy.url}/healthz", timeout=10).status_code == 200
        assert httpx.get(f"{proxy.url}/metrics", timeout=10).status_code == 200
    assert proxy.requests() == [] and _requests_total(proxy) == {}
