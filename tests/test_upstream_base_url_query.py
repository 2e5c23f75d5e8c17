"""An upstream whose `base_url` carries a query (`?key=...`, `?api-version=...`): every request
goes to the base path plus the client's path, with the base's query and then the client's; and
the key in that query reaches neither a client's error body nor a log line."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import httpx
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.test_server_wire_edges import CHAT, make_upstream  # noqa: F401 - the fixture

QUERY_KEY = "AIzaQUERYSECRET0123456789"


async def _ok(request: web.Request) -> web.StreamResponse:
    if request.path.endswith("/chat/completions"):
        return web.json_response({
            "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                         "finish_reason": "stop"}]})
    return web.json_response({"object": "list", "data": []})


@pytest.mark.parametrize("slash", ["", "/"], ids=["plain", "trailing slash"])
def test_a_base_url_query_follows_the_clients_path(make_upstream, make_proxy,  # noqa: F811
                                                   slash) -> None:
    upstream = make_upstream(_ok)
    proxy = make_proxy(f"{upstream.url}{slash}?key={QUERY_KEY}")
    headers = {"Authorization": f"Bearer {API_KEY}"}
    assert httpx.get(f"{proxy.base_url}/models?limit=2", headers=headers).status_code == 200
    assert httpx.get(f"{proxy.base_url}/models", headers=headers).status_code == 200
    chat = httpx.post(f"{proxy.base_url}/chat/completions", json=CHAT, headers=headers)
    assert chat.status_code == 200
    assert [path for _, path, _, _ in upstream.seen] == [
        f"/tenant-a/v1/models?key={QUERY_KEY}&limit=2",
        f"/tenant-a/v1/models?key={QUERY_KEY}",
        f"/tenant-a/v1/chat/completions?key={QUERY_KEY}",
    ]


@pytest.fixture
def garbled_upstream() -> Iterator[str]:
    """An upstream whose answers start with a status line aiohttp's client refuses."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)  # closing the socket does not wake a thread blocked in accept()
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with connection:
                connection.settimeout(5)
                connection.recv(65536)
                connection.sendall(b"HTTP/1.1 abc Nope\r\nContent-Length: 0\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{port}/v1"
    stop.set()
    thread.join(5)
    server.close()


@pytest.mark.parametrize("path", ["/chat/completions", "/embeddings"])
def test_a_garbled_answer_names_no_base_url_key(make_proxy, garbled_upstream, path) -> None:
    proxy = make_proxy(f"{garbled_upstream}?key={QUERY_KEY}")
    answer = httpx.post(f"{proxy.base_url}{path}", json=CHAT,
                        headers={"Authorization": f"Bearer {API_KEY}"}, timeout=10)
    assert answer.status_code == 502
    assert "unreachable" in answer.json()["error"]["message"]
    assert QUERY_KEY not in answer.text
    assert proxy.requests()[-1]["status"] == 502
    assert QUERY_KEY not in proxy.logs.text
