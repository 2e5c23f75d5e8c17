"""Request targets no route pattern matches (`OPTIONS *`, a path with an encoded newline, the
absolute form) are answered by the proxy like any unserved path: a JSON error, one request
line, nothing sent upstream. And the application runs no middleware: with one, aiohttp adds a
layer of its own, and every request pays for the coroutines around its handler."""

from __future__ import annotations

import socket

import orjson
import pytest

from proxy.server.app import build_app
from tests.harness import proxy_settings


def _send(port: int, method: bytes, target: bytes) -> tuple[int, dict]:
    request = method + b" " + target + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    answer = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), orjson.loads(body)


@pytest.mark.parametrize("method, target, path, status, code", [
    (b"OPTIONS", b"*", "*", 404, "not_found"),
    (b"GET", b"/a%0Ab", "/a\nb", 404, "not_found"),
    (b"POST", b"/v1%0A/x", "/v1\n/x", 404, "not_found"),
    (b"GET", b"http://elsewhere/", "/", 404, "not_found"),
    (b"PUT", b"http://elsewhere/healthz", "/healthz", 405, "method_not_allowed"),
    (b"OPTIONS", b"/metrics", "/metrics", 405, "method_not_allowed"),
])
def test_an_unmatched_target_gets_the_proxys_own_answer_and_line(
        fake, proxy, method: bytes, target: bytes, path: str, status: int, code: str) -> None:
    got, body = _send(proxy.port, method, target)
    assert (got, body["error"]["code"]) == (status, code)
    [line] = proxy.requests()
    assert (line["status"], line["error"], line["path"]) == (status, code, path)
    assert line["method"] == method.decode()
    assert not fake.requests


def test_the_application_runs_no_middleware(tmp_path) -> None:
    app = build_app(proxy_settings("http://127.0.0.1:9/v1", str(tmp_path / "state.db")))
    assert list(app.middlewares) == []
