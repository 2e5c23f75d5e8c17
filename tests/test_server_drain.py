"""Graceful shutdown: requests get `server.shutdown_grace_s` in all, then are cut cleanly."""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import orjson

from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy
from tests.process import ProxyProcess, assert_sound_database, cli, write_config

GRACE = 2.0
LONG = " ".join(f"word{i}" for i in range(2000))  # minutes of stream at 0.1 s a chunk
USER = [{"role": "user", "content": "go"}]


class StreamRead:
    """One streamed request read to its end on a thread of its own."""

    def __init__(self, url: str, body: dict[str, Any], thread: str) -> None:
        self.url, self.body, self.thread = url, body, thread
        self.data = b""
        self.error: BaseException | None = None
        self.ended = 0.0
        self.started = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with httpx.stream("POST", self.url, json=self.body, timeout=30,
                              headers={"x-thread-id": self.thread,
                                       "Authorization": "Bearer sk-x"}) as response:
                for chunk in response.iter_bytes():
                    self.data += chunk
                    self.started.set()
        except BaseException as exc:  # noqa: BLE001 - the test asserts there was none
            self.error = exc
        finally:
            self.ended = time.monotonic()
            self.started.set()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.thread}: the stream did not end"


def _last_event_data(stream: bytes) -> Any:
    return orjson.loads(stream.strip().rsplit(b"\n\n", 1)[-1].split(b"data: ", 1)[1])


def _streamed_chat(topic: str) -> dict[str, Any]:
    return {"model": "gpt-4o", "stream": True, "messages": [{"role": "user", "content": topic}]}


def _chat_by_topic(recorded: Any) -> Reply:
    asked = recorded.json["messages"][-1]["content"]
    return Reply.text(LONG if asked == "long" else "a short answer")


def test_sigterm_cuts_a_long_stream_at_the_grace_and_lets_a_short_one_finish(
        tmp_path: Path, make_fake) -> None:
    fake = make_fake(chunk_delay=0.1)
    fake.responder = _chat_by_topic
    # The short thread's context is past half its trigger (450): its anchor is written at
    # the stop, not kept in memory alone.
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          server={"shutdown_grace_s": GRACE},
                          models={"gpt-4o": {"max_input_tokens": 600}})
    proxy = ProxyProcess(config)
    try:
        url = f"{proxy.base_url}/chat/completions"
        long = StreamRead(url, _streamed_chat("long"), "long-thread")
        assert long.started.wait(10)
        short = StreamRead(url, _streamed_chat("short " * 300), "short-thread")
        assert short.started.wait(10)
        signalled = time.monotonic()
        proxy.signal(signal.SIGTERM)

        short.join(GRACE + 10)
        long.join(GRACE + 10)
        assert proxy.wait(GRACE + 10) == 0
        exited = time.monotonic()

        assert short.error is None and short.data.endswith(b"data: [DONE]\n\n")
        assert long.error is None, long.error  # the chunked body ended properly
        assert b"[DONE]" not in long.data
        frame = _last_event_data(long.data)
        assert frame["error"]["code"] == "proxy_shutting_down"
        assert frame["error"]["type"] == "server_error"
        assert GRACE * 0.9 <= long.ended - signalled < GRACE + 5
        assert exited - signalled < GRACE + 8

        lines = {line["thread"]: line for line in proxy.events("request")}
        assert lines["long-thread"]["status"] == 200
        assert "shutdown" in lines["long-thread"]["upstream_error"]
        assert lines["short-thread"]["status"] == 200
        assert "upstream_error" not in lines["short-thread"]
        assert proxy.events("requests_cut")[0]["requests"] == 1
        assert proxy.events("stopped")
    finally:
        proxy.kill()
    # The store closed after both handlers: the short stream's usage anchor was written.
    assert_sound_database(tmp_path / "state" / "state.db")
    shown = cli("inspect", "short-thread", "--config", str(config))
    assert shown.returncode == 0, shown.stderr
    [state] = orjson.loads(shown.stdout)  # a list: one state per tenant
    assert state["anchors"]


def _stopping(loop_thread: LoopThread, proxy: Any) -> Future[None]:
    """The in-process proxy's shutdown, as SIGTERM runs it, under way on its loop."""
    return asyncio.run_coroutine_threadsafe(stop_proxy(proxy), loop_thread.loop)


def test_a_request_still_waiting_for_upstream_at_the_grace_end_is_answered_503(
        loop_thread: LoopThread, fake, tmp_path: Path) -> None:
    fake.script(Reply.hang())
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), server={"shutdown_grace_s": 0.3})))
    answer: dict[str, httpx.Response] = {}

    def ask() -> None:
        answer["chat"] = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                                    json={"model": "gpt-4o", "messages": USER})

    asking = threading.Thread(target=ask)
    asking.start()
    while not fake.requests:
        time.sleep(0.02)
    stopping = _stopping(loop_thread, proxy)
    asking.join(15)
    stopping.result(15)

    response = answer["chat"]
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "proxy_shutting_down"
    line = proxy.requests()[-1]
    assert (line["status"], line["error"]) == (503, "proxy_shutting_down")


def test_a_responses_stream_cut_at_the_grace_end_gets_an_error_event(
        loop_thread: LoopThread, make_fake, tmp_path: Path) -> None:
    fake = make_fake(chunk_delay=0.1)
    fake.script(Reply.text(LONG))
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), server={"shutdown_grace_s": 0.3})))
    stream = StreamRead(f"{proxy.base_url}/responses",
                        {"model": "gpt-4o", "input": "go", "stream": True}, "responses-thread")
    assert stream.started.wait(10)
    _stopping(loop_thread, proxy).result(15)
    stream.join(10)

    assert stream.error is None
    last = stream.data.strip().rsplit(b"\n\n", 1)[-1]
    assert last.startswith(b"event: error\n")
    assert _last_event_data(stream.data)["error"]["code"] == "proxy_shutting_down"
    assert proxy.requests()[-1]["status"] == 200


def test_a_request_whose_body_is_still_arriving_at_sigterm_is_answered(
        loop_thread: LoopThread, fake, tmp_path: Path) -> None:
    fake.script(Reply.text("answered after the shutdown began"))
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), server={"shutdown_grace_s": 5.0})))
    body = orjson.dumps({"model": "gpt-4o", "messages": USER})
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=20) as client:
        client.sendall(head + body[:10])
        deadline = time.monotonic() + 10
        while proxy.app[SERVICES].drain.in_flight == 0:  # the handler waits for the rest
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stopping = _stopping(loop_thread, proxy)
        time.sleep(0.3)
        started = time.monotonic()
        client.sendall(body[10:])
        answer = _read_http_answer(client)
        waited = time.monotonic() - started
        stopping.result(15)

    assert answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert b"answered after the shutdown began" in answer
    assert waited < 3.0, "the body's end was only read when the grace ran out"
    assert proxy.requests()[-1]["status"] == 200


def _read_http_answer(sock: socket.socket) -> bytes:
    """Everything the proxy sends until it closes the connection (it closes after a shutdown)."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_a_second_sigterm_ends_the_grace_at_once(tmp_path: Path, make_fake) -> None:
    """An operator who will not wait out a long grace signals again: what is still running is
    cut then, as at the grace's end, and the store still closes cleanly."""
    fake = make_fake(chunk_delay=0.1)
    fake.responder = _chat_by_topic
    grace = 60.0
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          server={"shutdown_grace_s": grace})
    proxy = ProxyProcess(config)
    try:
        long = StreamRead(f"{proxy.base_url}/chat/completions", _streamed_chat("long"),
                          "long-thread")
        assert long.started.wait(10)
        proxy.signal(signal.SIGTERM)
        assert _wait_for(lambda: proxy.events("draining"), 10)
        hurried = time.monotonic()
        proxy.signal(signal.SIGTERM)
        long.join(15)
        assert proxy.wait(15) == 0
        assert time.monotonic() - hurried < 12, "the grace was waited out"
        assert long.error is None, long.error
        assert _last_event_data(long.data)["error"]["code"] == "proxy_shutting_down"
        assert proxy.events("shutdown_hurried")[0]["requests"] == 1
        assert proxy.events("requests_cut")[0]["requests"] == 1
        assert proxy.events("stopped")
        # The request line says what cut it: the grace was far from over.
        [line] = [e for e in proxy.events("request") if e.get("thread") == "long-thread"]
        assert line["upstream_error"] == "cut by shutdown: a second signal hurried it"
    finally:
        proxy.kill()
    assert_sound_database(tmp_path / "state" / "state.db")


def _wait_for(found: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found():
            return True
        time.sleep(0.05)
    return False


def test_a_connection_busy_at_sigterm_ends_with_its_answer(loop_thread: LoopThread, make_fake,
                                                           tmp_path: Path) -> None:
    # aiohttp takes a connection's keep-alive from each answer: the busy connection the
    # shutdown only stopped keeping alive went on reading requests, and served them (or took
    # them and closed without an answer), for the whole grace.
    fake = make_fake(chunk_delay=0.1)
    fake.responder = _chat_by_topic
    proxy = loop_thread.run(start_proxy(proxy_settings(
        fake.url, str(tmp_path / "state"), server={"shutdown_grace_s": 5.0})))
    long = StreamRead(f"{proxy.base_url}/chat/completions", _streamed_chat("long"), "long")
    assert long.started.wait(10)  # holds the shutdown in its grace
    body = orjson.dumps({"model": "gpt-4o", "messages": [{"role": "user", "content": "short"}]})
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: "
            f"application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as client:
        client.sendall(head + body[:10])
        deadline = time.monotonic() + 10
        while proxy.app[SERVICES].drain.in_flight < 2:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        stopping = _stopping(loop_thread, proxy)
        time.sleep(0.3)
        client.sendall(body[10:])
        answer = b""
        while b"a short answer" not in answer:
            answer += client.recv(65536)
        assert answer.startswith(b"HTTP/1.1 200")
        assert b"connection: close" in answer.lower().partition(b"\r\n\r\n")[0].split(b"\r\n")
        upstream_calls = len(fake.requests)
        try:
            client.sendall(head + body)  # the client's next request on that connection
            client.settimeout(3)
            after = client.recv(65536)
        except ConnectionError:
            after = b""
        assert after == b"", "the connection stays open after the shutdown began"
        assert len(fake.requests) == upstream_calls
    stopping.result(15)
    long.join(10)
