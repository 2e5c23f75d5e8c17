"""Which streamed answers anchor the next turn, through the proxy with the official client.

A whole answer anchors it however its stream ended around the answer: a chat stream without the
`[DONE]` some servers never send, a client that closes the connection as soon as it has the
answer's last event (the sync SDK does at `[DONE]`) while the upstream's body has not ended yet.
A stream cut before the answer's end never anchors it.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.test_responses_stream_ends import MESSAGE, _completed, _opening
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

USER = [{"role": "user", "content": "Say hello."}]
USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}


def _chunk(choices: list[Any], usage: Any = None) -> bytes:
    body = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o",
            "choices": choices, "usage": usage}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None, index: int = 0) -> dict[str, Any]:
    return {"index": index, "delta": delta, "finish_reason": finish}


ANSWER = (_chunk([_delta({"role": "assistant", "content": "Hel"})])
          + _chunk([_delta({"content": "lo"})]) + _chunk([_delta({}, "stop")]))
DONE = b"data: [DONE]\n\n"


def _sending(*writes: bytes, pause_s: float = 0.0,
             ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An upstream that streams `writes` and ends its body `pause_s` after the last one."""
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for data in writes:
            await out.write(data)
        await asyncio.sleep(pause_s)
        return out
    return answer


def _two_chat_turns(proxy: Any) -> list[dict[str, Any]]:
    """Two streamed turns of one thread with the sync SDK; the proxy's two request lines."""
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    messages: list[Any] = list(USER)
    for _ in range(2):
        chunks = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                                extra_headers={"x-thread-id": "t"})
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == "Hello"
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    client.close()
    return _lines(proxy, 2)


def _lines(proxy: Any, count: int) -> list[dict[str, Any]]:
    # A line is written when its handler ends, which may be after the client has its answer.
    deadline = time.monotonic() + 5
    while len(proxy.requests()) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return proxy.requests()


def test_a_chat_stream_without_done_anchors_the_next_turn(make_upstream,  # noqa: F811
                                                          make_proxy) -> None:
    usage = _chunk([], USAGE)
    proxy = make_proxy(make_upstream(_sending(ANSWER + usage)).url, tokens=COUNTED)
    first, second = _two_chat_turns(proxy)
    assert first["usage_input"] == 11 and "upstream_error" not in first
    assert second["anchor_used"] is True


def test_a_finished_chat_stream_whose_usage_chunk_has_no_line_end_is_whole(  # noqa: F811
        make_upstream, make_proxy) -> None:
    usage = _chunk([], USAGE).removesuffix(b"\n\n")
    proxy = make_proxy(make_upstream(_sending(ANSWER + usage)).url, tokens=COUNTED)
    first, second = _two_chat_turns(proxy)  # the SDK raises on a cut
    assert first["usage_input"] == 11 and "upstream_error" not in first
    assert second["anchor_used"] is True


def test_a_chat_stream_without_done_and_not_finished_anchors_nothing(make_upstream,  # noqa: F811
                                                                     make_proxy) -> None:
    # Two choices asked, one finished: the other was cut short, whatever the usage says.
    half = (_chunk([_delta({"role": "assistant", "content": "Hello"}),
                    _delta({"role": "assistant", "content": "Hi"}, index=1)])
            + _chunk([_delta({}, "stop")]) + _chunk([], USAGE))
    proxy = make_proxy(make_upstream(_sending(half)).url, tokens=COUNTED)
    first, second = _two_chat_turns(proxy)
    assert "usage_input" not in first and second["anchor_used"] is False


def test_a_client_gone_at_done_before_the_upstreams_end_still_anchors(make_upstream,  # noqa: F811
                                                                      make_proxy) -> None:
    # The sync SDK closes its connection at `[DONE]`; the upstream ends its body a bit later.
    proxy = make_proxy(make_upstream(_sending(ANSWER, _chunk([], USAGE), DONE,
                                              pause_s=0.5)).url, tokens=COUNTED)
    first, second = _two_chat_turns(proxy)
    assert first["usage_input"] == 11 and first["bytes_out"] > 0
    assert second["anchor_used"] is True


def test_a_client_gone_before_done_anchors_nothing(make_upstream, make_proxy) -> None:  # noqa: F811
    proxy = make_proxy(make_upstream(_sending(ANSWER, _chunk([], USAGE), pause_s=0.5)).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with client.chat.completions.create(model="gpt-4o", messages=USER, stream=True,
                                        extra_headers={"x-thread-id": "t"}) as chunks:
        next(iter(chunks))
    client.close()
    [line] = _lines(proxy, 1)
    assert line["status"] == 499 and "usage_input" not in line


def _read_until(port: int, path: str, body: dict[str, Any], end: bytes) -> bytes:
    """A client that sends `body` and closes its connection once it has read `end`."""
    payload = json.dumps(body).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: proxy\r\nx-thread-id: r\r\n"
                           f"Authorization: Bearer {API_KEY}\r\nContent-Type: application/json"
                           f"\r\nContent-Length: {len(payload)}\r\n\r\n".encode() + payload)
        received = b""
        while end not in received:
            data = connection.recv(65536)
            assert data, received
            received += data
    return received


@pytest.mark.parametrize("background", [True, False])
def test_a_responses_client_gone_after_the_last_event_still_anchors(make_upstream,  # noqa: F811
                                                                    make_proxy,
                                                                    background: bool) -> None:
    # An agent that stops reading at `response.completed` and drops the connection. In the
    # background with two upstreams, the proxy also records which one made the response.
    upstream = make_upstream(_sending(_opening(), _completed(), pause_s=0.5)).url
    proxy = make_proxy(upstream, upstreams={"other": {"base_url": upstream}},
                       routes=[{"model": "other-*", "upstream": "other"},
                               {"model": "*", "upstream": "fake"}], tokens=COUNTED)
    items: list[Any] = list(USER)
    for _ in range(2):
        _read_until(proxy.port, "/v1/responses", {"model": "gpt-4o", "input": items,
                                                  "stream": True, "background": background},
                    b'{"reasoning_tokens": 0}}}}\n\n')  # the end of `response.completed`
        items += [MESSAGE, {"role": "user", "content": "more"}]
    first, second = _lines(proxy, 2)
    assert first["usage_input"] == 9 and second["anchor_used"] is True
