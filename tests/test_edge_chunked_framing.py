"""Broken chunked framing gets one answer however the body arrives: the 400
`invalid_body_encoding` about the body's Transfer-Encoding, the connection closed. aiohttp's C
parser, given the head and a broken body in one read, refuses the whole request with the class
it uses for a malformed head, and the proxy answered `invalid_http_request`, "the request's HTTP
head is malformed"; given the body a moment after the head, the handler meets the broken
framing. A head that is malformed keeps its own code. (A malformed trailer in the read that
brought the head reads as a malformed header: `invalid_header`.)"""

from __future__ import annotations

import socket

import orjson
import pytest

from tests.raw_http import exchange, header, openai_error

HEAD = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
CHAT = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'
BROKEN = [
    b"ZZ\r\n" + CHAT + b"\r\n0\r\n\r\n",  # a chunk size that is no number
    b"5\r\n" + CHAT + b"\r\n0\r\n\r\n",  # a chunk longer than its size
    b"%x\r\n" % len(CHAT) + CHAT + b"\r\n0\r\nno colon here\r\n\r\n",  # a malformed trailer
]


def _no_error_lines(proxy) -> bool:
    return [line for line in proxy.logs.lines if line.get("level") in ("error", "critical")] == []


@pytest.mark.parametrize("body, apart", [
    (BROKEN[0], False), (BROKEN[1], False),
    (BROKEN[0], True), (BROKEN[1], True), (BROKEN[2], True)],
    ids=["bad_size-one_write", "chunk_too_long-one_write", "bad_size-body_later",
         "chunk_too_long-body_later", "bad_trailer-body_later"])
def test_broken_chunked_framing_is_the_same_400_however_the_body_arrives(
        fake, proxy, body: bytes, apart: bool) -> None:
    head, payload, closed = exchange(proxy.port, *((HEAD, body) if apart else (HEAD + body,)))
    assert head.split(b" ", 2)[1] == b"400"
    error = openai_error(payload)
    assert error["code"] == "invalid_body_encoding"
    assert "Transfer-Encoding" in str(error["message"])
    assert "head" not in str(error["message"])
    assert closed
    if apart:  # the handler met it: the request's own line says so
        assert header(head, b"connection") == b"close"
        [line] = proxy.requests()
        assert (line["status"], line["error"]) == (400, "invalid_body_encoding")
        assert line["path"] == "/v1/chat/completions"
    else:  # the parser refused the request before any handler: its event says so
        assert [event["error"] for event in proxy.logs.events("bad_http_request")] == [
            "invalid_body_encoding"]
    assert _no_error_lines(proxy)
    assert not fake.requests


def test_both_timings_give_the_very_same_answer(proxy) -> None:
    one_write = exchange(proxy.port, HEAD + BROKEN[0])
    body_later = exchange(proxy.port, HEAD, BROKEN[0])
    assert one_write[1] == body_later[1]


@pytest.mark.parametrize("request_bytes, code", [
    # A header line with a control character, then a broken chunked body.
    (HEAD.replace(b"Host: proxy\r\n", b"Host: proxy\r\nX-Odd: a\x01b\r\n") + BROKEN[0],
     "invalid_http_request"),
    (HEAD.replace(b"POST ", b"P(ST ") + BROKEN[0], "invalid_request_line"),
    (HEAD.replace(b"HTTP/1.1", b"HTTP/9.9") + BROKEN[0], "invalid_request_line"),
    (HEAD.replace(b"Host: proxy\r\n", b"Host: proxy\r\nSec-WebSocket-Key1: x\r\n") + BROKEN[0],
     "invalid_header"),
    (HEAD.replace(b"Host: proxy\r\n", b"Host: proxy\r\nContent-Length: 3\r\n") + BROKEN[0],
     "invalid_http_request"),  # Content-Length beside Transfer-Encoding
])
def test_a_malformed_head_before_a_broken_body_keeps_its_own_code(
        fake, proxy, request_bytes: bytes, code: str) -> None:
    head, payload, closed = exchange(proxy.port, request_bytes)
    assert head.split(b" ", 2)[1] == b"400"
    assert openai_error(payload)["code"] == code
    assert closed
    assert [event["error"] for event in proxy.logs.events("bad_http_request")] == [code]
    assert proxy.requests() == []
    assert not fake.requests


@pytest.mark.parametrize("apart", [False, True], ids=["one_write", "body_later"])
def test_whole_chunked_framing_still_reaches_upstream(fake, proxy, apart: bool) -> None:
    body = b"%x\r\n" % len(CHAT) + CHAT + b"\r\n0\r\n\r\n"
    head, payload, closed = exchange(proxy.port, *((HEAD, body) if apart else (HEAD + body,)))
    assert head.split(b" ", 2)[1] == b"200"
    assert orjson.loads(payload)["choices"]
    assert not closed  # kept alive for the next request
    assert [orjson.loads(recorded.body)["messages"] for recorded in fake.requests] == [
        [{"role": "user", "content": "hi"}]]


def test_requests_pipelined_in_one_write_are_each_answered(fake, proxy) -> None:
    body = b"%x\r\n" % len(CHAT) + CHAT + b"\r\n0\r\n\r\n"
    probe = b"GET /healthz HTTP/1.1\r\nHost: proxy\r\n\r\n"
    with socket.create_connection(("127.0.0.1", proxy.port), timeout=5) as sock:
        sock.sendall(HEAD + body + probe + probe.replace(b"\r\n\r\n", b"\r\nConnection: close"
                                                         b"\r\n\r\n"))
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert [part[:3] for part in answer.split(b"HTTP/1.1 ")[1:]] == [b"200", b"200", b"200"]
    assert answer.count(b'{"status":"ok"}') == 2
    assert len(fake.requests) == 1
