"""What aiohttp's HTTP parser rejects is answered in OpenAI's error shape, quoting no header."""

from __future__ import annotations

import socket
import time

import pytest

from tests.harness import RunningProxy
from tests.raw_http import openai_error

SECRET = b"sk-SECRET-0123456789"
BODY = b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}'


def _request(head_lines: bytes, body: bytes) -> bytes:
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\n" + head_lines
            + b"Content-Length: %d\r\n\r\n" % len(body) + body)


def _exchange(port: int, head_lines: bytes, body: bytes = BODY) -> tuple[int, bytes]:
    """Send one raw request; the answer's status and body (the proxy closes after it)."""
    return _sent(port, _request(head_lines, body))


def _sent(port: int, request: bytes | tuple[bytes, bytes]) -> tuple[int, bytes]:
    """Send raw bytes (a pair: the second part a moment after the first); the answer's status
    and body, read to its length or, without one, to the connection's end (a body that was
    read whole leaves the connection open for the next request)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        first, *rest = (request,) if isinstance(request, bytes) else request
        sock.sendall(first)
        for part in rest:
            time.sleep(0.2)
            sock.sendall(part)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        head, _, payload = answer.partition(b"\r\n\r\n")
        length = _content_length(head)
        while (length is None or len(payload) < length) and (chunk := sock.recv(65536)):
            payload += chunk
    return int(head.split(b" ", 2)[1]), payload


def _content_length(head: bytes) -> int | None:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return None


@pytest.mark.parametrize("header", [
    b"Authorization: Bearer " + SECRET + b"\x01\r\n",  # a control character
    b"Authorization: Bearer " + SECRET + b"\x00x\r\n",  # NUL
    b"X-Thread-Id: " + SECRET + b"\rx\r\n",  # a bare CR
])
def test_a_malformed_header_is_a_400_in_openai_shape_without_its_value(
        proxy: RunningProxy, header: bytes) -> None:
    status, payload = _exchange(proxy.port, header)
    assert status == 400
    assert openai_error(payload)["code"] == "invalid_http_request"
    assert SECRET not in payload
    assert SECRET.decode() not in proxy.logs.text
    assert proxy.logs.events("bad_http_request")[-1]["status"] == 400


def test_an_over_long_header_line_is_a_431_in_openai_shape_without_its_value(
        proxy: RunningProxy) -> None:
    status, payload = _exchange(proxy.port, b"Authorization: Bearer " + SECRET
                                + b"A" * 70_000 + b"\r\n")
    assert status == 431
    assert openai_error(payload)["code"] == "request_header_too_large"
    assert SECRET not in payload and b"AAAA" not in payload
    assert SECRET.decode() not in proxy.logs.text


def test_an_unknown_content_encoding_is_a_415(proxy: RunningProxy, fake) -> None:
    status, payload = _exchange(proxy.port, b"Content-Encoding: compress\r\n")
    assert status == 415
    assert openai_error(payload)["code"] == "unsupported_content_encoding"
    assert not fake.requests


def test_a_body_that_is_not_the_gzip_it_claims_is_a_400(proxy: RunningProxy, fake) -> None:
    status, payload = _exchange(proxy.port, b"Content-Encoding: gzip\r\n")
    assert status == 400
    assert openai_error(payload)["code"] == "invalid_body_encoding"
    assert not fake.requests


@pytest.mark.parametrize("request_bytes", [
    _request(b"Content-Encoding: gzip\r\n", BODY),  # not the gzip it claims
    _request(b"Content-Encoding: deflate\r\n", BODY),
    # gzip that breaks after the head was read (sent apart, as a slow client's body comes)
    (_request(b"Content-Encoding: gzip\r\n", BODY)[:-len(BODY)], BODY),
    # chunked framing that breaks while the handler reads the body: a chunk size that is no
    # number. (Sent with the head, aiohttp's parser refuses the request before any handler.)
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: proxy\r\nTransfer-Encoding: chunked\r\n"
     b"\r\n5\r\n{\"a\":\r\n", b"zz\r\n1}\r\n0\r\n\r\n"),
])
def test_an_undecodable_body_is_the_client_error_alone_not_an_error_line(
        proxy: RunningProxy, request_bytes: bytes | tuple[bytes, bytes]) -> None:
    # aiohttp reads what is left of a body after the answer; one that failed to decode (when
    # aiohttp inflated bodies) or to frame raised its error again there, logged at ERROR with
    # a traceback ("Unhandled exception"), as for a proxy bug, once for every such request.
    status, payload = _sent(proxy.port, request_bytes)
    assert status == 400
    assert openai_error(payload)["code"] == "invalid_body_encoding"
    assert [line["status"] for line in proxy.requests()] == [400]
    assert [line for line in proxy.logs.lines if line.get("level") in ("error", "critical")] == []

