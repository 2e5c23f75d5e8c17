"""A request aiohttp's HTTP parser refuses never reaches a handler: the runner answers it
(431, 400) and logs `bad_http_request`. It is a request the proxy answered all the same,
so `proxy_requests_total` counts it, under `kind="other"`, once."""

from __future__ import annotations

import socket

import httpx
from prometheus_client.parser import text_string_to_metric_families


def _requests_total(proxy) -> dict[tuple[str, str], float]:
    text = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    return {(s.labels["kind"], s.labels["status"]): s.value
            for family in text_string_to_metric_families(text) if family.name == "proxy_requests"
            for s in family.samples if s.name == "proxy_requests_total"}


def _send_raw(port: int, header: bytes) -> bytes:
    body = b'{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}'
    request = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n" + header +
               b"\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        try:
            sock.sendall(request)
            while chunk := sock.recv(65536):
                answer += chunk
        except ConnectionError:  # refused before it was all read: answered and closed
            pass
    return answer


def test_requests_the_parser_refuses_are_counted_once_each(fake, proxy) -> None:
    heads = [_send_raw(proxy.port, b"x-big: " + b"a" * 70_000),
             _send_raw(proxy.port, b"x-ctrl: a\x01b")]
    assert [h.split(b" ", 2)[1] for h in heads] == [b"431", b"400"]
    refusals = proxy.logs.events("bad_http_request")
    assert sorted(e["status"] for e in refusals) == [400, 431]
    assert proxy.requests() == []  # their line is `bad_http_request`, not a second one
    assert _requests_total(proxy) == {("other", "431"): 1.0, ("other", "400"): 1.0}
    assert not fake.requests
