"""Talking to the proxy over a raw socket, for what the official client never sends (a CONNECT,
a broken chunked body), and reading its answer."""

from __future__ import annotations

import socket
import time

import orjson


def exchange(port: int, *parts: bytes) -> tuple[bytes, bytes, bool]:
    """Send `parts` half a second apart; the answer's head and body (read to its length), and
    whether the proxy then closed the connection (within a second)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        for index, part in enumerate(parts):
            if index:
                time.sleep(0.5)
            sock.sendall(part)
        answer = b""
        while b"\r\n\r\n" not in answer and (chunk := sock.recv(65536)):
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(header(head, b"content-length") or 0)
        while len(body) < length and (chunk := sock.recv(65536)):
            body += chunk
        sock.settimeout(1)
        try:
            closed = sock.recv(65536) == b""
        except (TimeoutError, ConnectionError) as exc:
            closed = isinstance(exc, ConnectionError)
    return head, body, closed


def header(head: bytes, name: bytes) -> bytes | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name:
            return value.strip()
    return None


def openai_error(payload: bytes) -> dict[str, object]:
    """The error of an answer in OpenAI's shape, of type `invalid_request_error`."""
    error = orjson.loads(payload)["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    return error
