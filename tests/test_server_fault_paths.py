"""A proxy bug, met while serving: the client gets a 500 `proxy_error` in OpenAI's shape (or,
once its answer is under way, an answer broken off, never a second one), the log one
`unhandled_error` with the traceback and without the credential, and the proxy serves on.

The fault is put at the outer edge: one service object of the running application (or the
aiohttp function an `Expect` header reaches) is replaced by one that raises; everything
between the client and it is the real server.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import openai
import pytest

from proxy.errors import UpstreamUnavailable
from proxy.server import client_body
from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.replies import Reply
from tests.harness import RunningProxy

SECRET = "sk-secret-fault-0123456789abcdef"
USER = [{"role": "user", "content": "Say hello."}]


class BrokenOrigins:
    """`services.origins` with a bug in each step the handler calls."""

    async def upstream_of(self, made_id: str) -> Any:
        raise RuntimeError("a bug while looking up where the id was made")

    async def stream_made(self, prepared: Any, tap: Any) -> None:
        raise RuntimeError("a bug after the stream was relayed")

    async def answer_made(self, prepared: Any, data: bytes) -> None:
        raise RuntimeError("a bug after the answer was sent")


@pytest.fixture
def broken(make_proxy: Callable[..., RunningProxy], fake: FakeUpstream) -> RunningProxy:
    proxy = make_proxy(fake)
    services = proxy.app[SERVICES]
    services.configured = replace(services.configured, origins=BrokenOrigins())  # type: ignore[arg-type]
    return proxy


def _assert_healthy(proxy: RunningProxy) -> None:
    assert httpx.get(f"{proxy.url}/healthz", timeout=10).json() == {"status": "ok"}
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=10,
                        json={"model": "gpt-4o", "messages": USER})
    assert answer.status_code == 200, answer.text


def _assert_one_crash_without_the_secret(proxy: RunningProxy, fault: str) -> dict[str, Any]:
    [crash] = proxy.logs.events("unhandled_error")
    assert crash["level"] == "error"
    assert "Traceback (most recent call last)" in crash["exception"]
    assert f"RuntimeError: {fault}" in crash["exception"]
    assert SECRET not in proxy.logs.text
    return crash


def test_a_handler_fault_is_a_500_proxy_error_in_openai_shape_and_the_proxy_serves_on(
        broken: RunningProxy) -> None:
    client = openai.OpenAI(base_url=broken.base_url, api_key=SECRET, max_retries=0, timeout=10)
    with client, pytest.raises(openai.InternalServerError) as failed:
        client.responses.create(model="gpt-4o", input="Say hello.",
                                previous_response_id="resp_made_elsewhere")
    assert failed.value.status_code == 500
    assert failed.value.response.json() == {"error": {
        "message": "The proxy failed to handle this request; see its log.",
        "type": "server_error", "param": None, "code": "proxy_error"}}

    crash = _assert_one_crash_without_the_secret(
        broken, "a bug while looking up where the id was made")
    assert (crash["path"], crash["method"]) == ("/v1/responses", "POST")
    [line] = broken.requests()
    assert (line["status"], line["error"]) == (500, "RuntimeError")
    _assert_healthy(broken)


def _raw_exchange(port: int, request: bytes) -> bytes:
    """What the proxy sends back on one connection, read until it closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as connection:
        connection.sendall(request)
        received = b""
        while chunk := connection.recv(65536):
            received += chunk
    return received


def _post(path: str, body: bytes, *extra: str) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: proxy", "Content-Type: application/json",
            f"Authorization: Bearer {SECRET}", f"Content-Length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def test_a_fault_noting_a_relayed_stream_leaves_it_whole_without_a_second_answer(
        broken: RunningProxy) -> None:
    body = b'{"model": "gpt-4o", "stream": true, "messages": [{"role": "user", "content": "Hi"}]}'
    received = _raw_exchange(broken.port, _post("/v1/chat/completions", body,
                                                "Connection: close"))

    # The bookkeeping after the relay failed: the stream still ends as relayed, its last
    # chunk included. An error answer written after it would land inside the chunked body,
    # where a client takes it for garbage.
    assert received.startswith(b"HTTP/1.1 200 OK\r\n")
    assert received.count(b"HTTP/1.1") == 1, received[-300:]
    assert b"data: [DONE]" in received
    assert received.endswith(b"0\r\n\r\n")
    crash = _assert_one_crash_without_the_secret(broken, "a bug after the stream was relayed")
    assert crash["after_answer"] is True
    assert broken.requests()[0]["status"] == 200
    _assert_healthy(broken)


def test_a_fault_after_a_whole_answer_went_out_leaves_the_answer_standing(
        broken: RunningProxy) -> None:
    # One connection, kept alive: were it closed after each answer, the next request, sent on
    # it meanwhile, would fail (no retries here to hide it).
    client = openai.OpenAI(base_url=broken.base_url, api_key=SECRET, max_retries=0, timeout=10)
    with client:
        for _ in range(3):
            answer = client.chat.completions.create(model="gpt-4o", messages=USER)
            assert answer.choices[0].message.content
    crashes = broken.logs.events("unhandled_error")
    assert len(crashes) == 3
    assert all("a bug after the answer was sent" in crash["exception"]
               and crash["after_answer"] is True for crash in crashes)
    assert [line["status"] for line in broken.requests()] == [200, 200, 200]
    assert SECRET not in broken.logs.text


def _answer_on(connection: socket.socket) -> bytes:
    """One whole answer with a Content-Length, read off a kept-alive connection."""
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = connection.recv(65536)
        assert chunk, "the proxy closed the connection"
        received += chunk
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line.split(b":", 1)[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))
    while len(body) < length:
        chunk = connection.recv(65536)
        assert chunk, "the proxy closed the connection mid-answer"
        body += chunk
    assert len(body) == length and head.startswith(b"HTTP/1.1 200 OK"), head
    return body


def test_a_fault_noting_a_whole_answer_keeps_its_connection(broken: RunningProxy) -> None:
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}'
    with socket.create_connection(("127.0.0.1", broken.port), timeout=10) as connection:
        for _ in range(2):  # the second on the same connection: it was not closed
            connection.sendall(_post("/v1/chat/completions", body))
            assert b'"choices"' in _answer_on(connection)
    assert len(broken.logs.events("unhandled_error")) == 2


class TapThatBreaks:
    """A stream's tap that raises `fault` at its third chunk, the answer half relayed."""

    def __init__(self, tap: Any, fault: Exception) -> None:
        self._tap, self._fault, self._fed = tap, fault, 0

    def feed(self, chunk: bytes) -> bytes:
        self._fed += 1
        if self._fed == 3:
            raise self._fault
        return self._tap.feed(chunk)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tap, name)


def _breaking_streams(proxy: RunningProxy, fault: Exception) -> Callable[[], None]:
    """Every stream's tap of `proxy` raises `fault` midway; returns the undo."""
    pipeline = proxy.app[SERVICES].pipeline
    prepare = pipeline.prepare

    async def prepare_breaking(*args: Any, **kwargs: Any) -> Any:
        prepared = await prepare(*args, **kwargs)
        made = prepared.stream_tap
        prepared.stream_tap = lambda: TapThatBreaks(made(), fault)
        return prepared

    pipeline.prepare = prepare_breaking
    return lambda: setattr(pipeline, "prepare", prepare)


def _stream_broken_off(proxy: RunningProxy) -> str:
    """Streams a chat answer with the SDK, which must raise; returns the text it got."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=SECRET, max_retries=0, timeout=10)
    got: list[str] = []
    with client, pytest.raises(openai.APIConnectionError) as failed:
        for chunk in client.chat.completions.create(model="gpt-4o", messages=USER, stream=True):
            got.extend(choice.delta.content or "" for choice in chunk.choices)
    # Broken off where the fault was, as an upstream that broke off: not an error answer
    # written inside the stream's body ("illegal chunk header: HTTP/1.1 500 ...").
    assert "incomplete chunked read" in str(failed.value.__cause__)
    return "".join(got)


@pytest.mark.parametrize("fault", [RuntimeError("a bug in the middle of a stream"),
                                   UpstreamUnavailable("an error of the proxy's own, late")],
                         ids=["bug", "proxy error"])
def test_a_fault_in_the_middle_of_a_stream_breaks_it_off_for_the_sdk(
        make_proxy: Callable[..., RunningProxy], make_fake: Callable[..., FakeUpstream],
        fault: Exception) -> None:
    fake = make_fake(chunk_delay=0.02)  # an event a chunk
    fake.script(Reply.text("one two three four five six seven eight nine ten"))
    proxy = make_proxy(fake)
    undo = _breaking_streams(proxy, fault)
    assert "ten" not in _stream_broken_off(proxy)
    [line] = proxy.requests()
    if isinstance(fault, RuntimeError):
        _assert_one_crash_without_the_secret(proxy, str(fault))
        assert (line["status"], line["error"]) == (200, "RuntimeError")
    else:
        assert not proxy.logs.events("unhandled_error")
        assert line["error"] == "upstream_unreachable"
    undo()
    _assert_healthy(proxy)


async def _failing_expect(request: Any) -> None:
    raise RuntimeError("a bug in the Expect step")


def test_a_fault_outside_the_handler_is_a_500_proxy_error_logged_as_unhandled_error(
        broken: RunningProxy, monkeypatch: pytest.MonkeyPatch) -> None:
    # The `Expect` step runs before the handler (aiohttp calls it): a fault there reaches the
    # connection's own error answer, not the handler's.
    monkeypatch.setattr(client_body, "_default_expect_handler", _failing_expect)
    body = b'{"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}]}'
    received = _raw_exchange(broken.port, _post("/v1/chat/completions", body,
                                                "Expect: 100-continue"))

    head, _, answer = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 500 ") and b"Connection: close" in head, head
    assert b"Content-Type: application/json" in head, head
    assert httpx.Response(500, content=answer).json() == {"error": {
        "message": "The proxy failed to handle this request; see its log.",
        "type": "server_error", "param": None, "code": "proxy_error"}}
    crash = _assert_one_crash_without_the_secret(broken, "a bug in the Expect step")
    assert (crash["path"], crash["method"]) == ("/v1/chat/completions", "POST")
    # No handler ran, so no request line counted it: the connection does, as `other`.
    metrics = httpx.get(f"{broken.url}/metrics", timeout=10).text
    assert 'proxy_requests_total{kind="other",status="500"} 1.0' in metrics
    monkeypatch.undo()
    _assert_healthy(broken)
