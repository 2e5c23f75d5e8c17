"""A client that leaves once it has the answer's last event (the sync SDK closes its connection
at `[DONE]`; an agent may stop at `response.completed`) while the upstream's body has not ended:
it got the whole answer, so its request line says the upstream's status, not 499, with
`client_left_after_end`, and the metrics count it so. One that leaves before the end is a 499.
And a stream whose last word was a failure gets no second error event when it then breaks."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.test_metrics_parser_refusals import _requests_total
from tests.test_responses_resumed_stream import DELTAS, RESPONSE
from tests.test_responses_resumed_stream import _event as _resumed_event
from tests.test_responses_stream_ends import STARTED, _completed, _event, _opening
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import (ANSWER, DONE, USAGE, USER, _chunk, _lines,
                                             _read_until, _sending)


def test_a_chat_client_gone_at_done_is_logged_with_the_upstreams_status(  # noqa: F811
        make_upstream, make_proxy) -> None:
    proxy = make_proxy(make_upstream(_sending(ANSWER, _chunk([], USAGE), DONE,
                                              pause_s=0.5)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
    client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hello"
    [line] = _lines(proxy, 1)
    assert line["status"] == 200 and line["client_left_after_end"] is True
    assert "error" not in line and line["usage_input"] == 11
    assert _requests_total(proxy) == {("chat", "200"): 1.0}


def test_a_responses_client_gone_after_completed_is_logged_with_the_upstreams_status(  # noqa: F811
        make_upstream, make_proxy) -> None:
    proxy = make_proxy(make_upstream(_sending(_opening(), _completed(), pause_s=0.5)).url)
    _read_until(proxy.port, "/v1/responses", {"model": "gpt-4o", "input": USER, "stream": True},
                b'{"reasoning_tokens": 0}}}}\n\n')
    [line] = _lines(proxy, 1)
    assert line["status"] == 200 and line["client_left_after_end"] is True
    assert _requests_total(proxy) == {("responses", "200"): 1.0}


def test_a_client_gone_before_the_end_is_still_a_499(make_upstream, make_proxy) -> None:  # noqa: F811
    proxy = make_proxy(make_upstream(_sending(ANSWER, pause_s=0.5)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with client.chat.completions.create(model="gpt-4o", messages=USER, stream=True) as chunks:
        next(iter(chunks))
    client.close()
    [line] = _lines(proxy, 1)
    assert line["status"] == 499 and line["error"] == "client_disconnected"
    assert "client_left_after_end" not in line


FAILED = _event("response.failed", 3, response={
    **STARTED, "status": "failed", "error": {"code": "server_error", "message": "boom"}})
CHAT_ERROR = b"data: " + json.dumps({"error": {"message": "boom", "type": "server_error",
                                               "code": None, "param": None}}).encode() + b"\n\n"


def _breaking(body: bytes) -> Any:
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(body)
        await asyncio.sleep(0.1)
        if request.transport is not None:
            request.transport.abort()
        return out
    return answer


@pytest.mark.parametrize("path, body, sent", [
    ("/responses", {"model": "gpt-4o", "input": USER, "stream": True}, _opening() + FAILED),
    ("/chat/completions", {"model": "gpt-4o", "messages": USER, "stream": True,
                           "stream_options": {"include_usage": True}}, ANSWER + CHAT_ERROR),
], ids=["response.failed", "chat error frame"])
def test_a_stream_broken_after_its_failure_gets_no_second_error(  # noqa: F811
        make_upstream, make_proxy, path: str, body: dict[str, Any], sent: bytes) -> None:
    proxy = make_proxy(make_upstream(_breaking(sent)).url)
    with httpx.stream("POST", f"{proxy.base_url}{path}", json=body, timeout=20) as answer:
        assert answer.read() == sent
    line = proxy.requests()[-1]
    assert line["status"] == 200 and "usage_input" not in line


def test_a_client_gone_after_a_resumed_streams_end_is_logged_with_its_status(  # noqa: F811
        make_upstream, make_proxy) -> None:
    end = _resumed_event("response.completed", 6, response=RESPONSE)
    proxy = make_proxy(make_upstream(_sending(DELTAS + end, pause_s=0.5)).url)
    with httpx.stream("GET", f"{proxy.base_url}/responses/resp_bg?stream=true",
                      timeout=20) as resumed:
        received = b""
        for piece in resumed.iter_raw():
            received += piece
            if received.endswith(end):
                break
    [line] = _lines(proxy, 1)
    assert line["status"] == 200 and line["client_left_after_end"] is True
