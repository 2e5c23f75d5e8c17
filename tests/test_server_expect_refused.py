"""A request whose `Expect` header asks for something other than `100-continue`: aiohttp
refuses it (417) in the step it runs before any handler. The refusal is the proxy's own error,
in OpenAI's shape and with a request line, as every other; aiohttp's plain text quoted the
header's value back and no log line or metric told of it."""

from __future__ import annotations

import socket

import httpx
import pytest

from tests.harness import RunningProxy

ODD = "sk-odd-expectation-0123"


def _exchange(port: int, method: str, path: str) -> tuple[bytes, bytes]:
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}'
    request = (f"{method} {path} HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
               f"Expect: {ODD}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request.encode() + body)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    head, _, answer = received.partition(b"\r\n\r\n")
    return head, answer


@pytest.mark.parametrize("method, path, kind", [("POST", "/v1/chat/completions", "chat"),
                                                ("POST", "/v1/responses", "responses"),
                                                ("POST", "/v1/files", "passthrough"),
                                                ("POST", "/elsewhere", "other"),
                                                ("GET", "/healthz", "other")])
def test_an_expectation_the_proxy_cannot_meet_is_a_417_in_openai_shape_with_its_line(
        proxy: RunningProxy, fake, method: str, path: str, kind: str) -> None:
    head, answer = _exchange(proxy.port, method, path)
    assert head.startswith(b"HTTP/1.1 417 "), head
    assert b"Content-Type: application/json" in head, head
    error = httpx.Response(417, content=answer).json()["error"]
    assert (error["type"], error["param"], error["code"]) == (
        "invalid_request_error", None, "expectation_failed")
    assert "100-continue" in error["message"] and ODD not in answer.decode()
    [line] = proxy.requests()
    assert (line["status"], line["error"], line["path"]) == (417, "expectation_failed", path)
    assert ODD not in proxy.logs.text
    assert fake.requests == []
    metrics = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    assert f'proxy_requests_total{{kind="{kind}",status="417"}} 1.0' in metrics
