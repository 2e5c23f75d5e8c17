"""README claims that had no test: `threads.forward_headers`, and the parser's
`invalid_request_line` / `invalid_header` codes of the error table."""

from __future__ import annotations

import socket

import httpx
import orjson
import pytest

from tests.conftest import API_KEY
from tests.harness import RunningProxy

THREAD_HEADERS = {"x-thread-id": "task-42", "session_id": "sess-7"}
CHAT = {"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}


def _sent_headers(fake, proxy: RunningProxy) -> list[dict[str, str]]:
    """The headers upstream saw for a chat request and a pass-through one, both naming a thread."""
    before = len(fake.requests)
    headers = {"authorization": f"Bearer {API_KEY}", **THREAD_HEADERS}
    chat = httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=headers, timeout=20)
    models = httpx.get(f"{proxy.base_url}/models", headers=headers, timeout=20)
    assert (chat.status_code, models.status_code) == (200, 200)
    return [r.headers for r in fake.requests[before:]]


def test_thread_headers_reach_upstream_by_default(make_proxy, fake) -> None:
    for headers in _sent_headers(fake, make_proxy(fake)):
        assert {name: headers.get(name) for name in THREAD_HEADERS} == THREAD_HEADERS


def test_forward_headers_false_keeps_the_thread_headers_from_upstream(make_proxy, fake) -> None:
    proxy = make_proxy(fake, threads={"forward_headers": False})
    sent = _sent_headers(fake, proxy)
    assert len(sent) == 2
    for headers in sent:
        assert not set(THREAD_HEADERS) & set(headers), headers
    # The thread is still named by them: the request line says where the id came from.
    chat_line = next(line for line in proxy.requests() if line["path"] == "/v1/chat/completions")
    assert chat_line["thread"] == "task-42" and chat_line["thread_source"] == "header:x-thread-id"


@pytest.mark.parametrize(("head", "code"), [
    (b"G(T /v1/models HTTP/1.1\r\nHost: proxy\r\n\r\n", "invalid_request_line"),  # a bad method
    (b"GET /v1/models HTTP/9.9\r\nHost: proxy\r\n\r\n", "invalid_request_line"),  # a bad version
    (b"GET /v1/models HTTP/1.1\r\nHost: proxy\r\nUpgrade: websocket\r\nConnection: upgrade\r\n"
     b"Sec-WebSocket-Key1: x\r\n\r\n", "invalid_header"),
])
def test_a_request_the_parser_refuses_gets_its_code_in_openai_shape(proxy: RunningProxy,
                                                                   head: bytes, code: str) -> None:
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        sock.sendall(head)
        answer = b""
        while chunk := sock.recv(65536):  # the proxy closes after the answer
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.split(b" ")[1] == b"400"
    error = orjson.loads(rest.partition(b"\r\n\r\n")[2])["error"]
    assert (error["code"], error["type"]) == (code, "invalid_request_error")
    assert proxy.logs.events("bad_http_request")[-1]["error"] == code
    metrics = httpx.get(f"{proxy.url}/metrics", timeout=10).text
    assert 'proxy_requests_total{kind="other",status="400"} 1.0' in metrics
