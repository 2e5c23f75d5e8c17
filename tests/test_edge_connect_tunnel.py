"""A `CONNECT` (what a client sends when it is given the proxy as its `HTTPS_PROXY`) is answered
by the proxy like any method no route serves: a 405 in OpenAI's error shape that says the proxy
is no forward proxy, one request line, one count under `kind="other"`, nothing upstream, and
the connection closed (the client meant a tunnel: whatever it sends next is not HTTP).

aiohttp's router cannot route a CONNECT at all (its URL has no path), so before the runner
answered it the client got aiohttp's plain-text 404 and no line told the operator of it."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.raw_http import exchange, header
from tests.test_metrics_parser_refusals import _requests_total


@pytest.mark.parametrize("target, tail", [
    (b"api.openai.com:443", b""),
    # A client that does not wait for the tunnel: its TLS hello must not be answered as well.
    (b"api.openai.com:443", b"\x16\x03\x01\x00\x05hello"),
    (b"[::1]:8443", b""),
    (b"/v1/chat/completions", b""),  # origin form: never forwarded as a CONNECT either
])
def test_a_connect_gets_the_proxys_405_its_line_and_its_count(fake, proxy, target: bytes,
                                                               tail: bytes) -> None:
    request = (b"CONNECT " + target + b" HTTP/1.1\r\nHost: " + target
               + b"\r\nUser-Agent: test\r\n\r\n" + tail)
    head, body, closed = exchange(proxy.port, request)

    assert head.split(b" ", 2)[1] == b"405"
    assert header(head, b"content-type") == b"application/json"
    error = orjson.loads(body)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert (error["type"], error["code"], error["param"]) == ("invalid_request_error",
                                                              "method_not_allowed", None)
    assert "forward proxy" in error["message"] and "HTTPS_PROXY" in error["message"]
    assert closed

    [line] = proxy.requests()
    assert (line["status"], line["error"], line["method"]) == (405, "method_not_allowed",
                                                               "CONNECT")
    assert line["path"] == target.decode()
    assert _requests_total(proxy) == {("other", "405"): 1.0}
    assert proxy.logs.events("bad_http_request") == []
    assert [l for l in proxy.logs.lines if l.get("level") in ("error", "critical")] == []
    assert not fake.requests


def test_other_unserved_requests_keep_their_answers(fake, proxy) -> None:
    # The CONNECT answer is beside the router's, not instead of it.
    assert httpx.get(f"{proxy.url}/nope", timeout=10).json()["error"]["code"] == "not_found"
    assert httpx.put(f"{proxy.url}/healthz", timeout=10).status_code == 405
    assert httpx.get(f"{proxy.url}/healthz", timeout=10).json() == {"status": "ok"}
    assert [line["status"] for line in proxy.requests()] == [404, 405]
    assert not fake.requests
