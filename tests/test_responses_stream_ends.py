"""How a Responses stream ends through the proxy. Its last event is `response.completed`,
`response.incomplete` or `response.failed` (or an `error` event): a stream whose body ends
cleanly before any of them is an answer cut short, and the client's SDK must raise on it rather
than take the events so far for the whole answer (`client.responses.create(stream=True)` ends
its iteration quietly otherwise)."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from proxy.server import taps
from proxy.sse import SseDecoder
from tests.conftest import API_KEY
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

MODEL = "gpt-5-mini"
INPUT = [{"role": "user", "content": "Say hello."}]
STARTED = {"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
           "error": None, "incomplete_details": None, "model": MODEL, "output": [],
           "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "usage": None}
MESSAGE = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
           "content": [{"type": "output_text", "text": "Hello", "annotations": []}]}
USAGE = {"input_tokens": 9, "output_tokens": 1, "total_tokens": 10,
         "input_tokens_details": {"cached_tokens": 0},
         "output_tokens_details": {"reasoning_tokens": 0}}


def _event(kind: str, sequence: int, end: bytes = b"\n\n", **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": sequence, **fields})
    return f"event: {kind}\ndata: {data}".encode() + end


def _opening() -> bytes:
    return (_event("response.created", 0, response=STARTED)
            + _event("response.output_item.added", 1, output_index=0,
                     item={**MESSAGE, "status": "in_progress", "content": []})
            + _event("response.content_part.added", 2, output_index=0, item_id="msg_1",
                     content_index=0, part={"type": "output_text", "text": "", "annotations": []}))


def _delta(end: bytes = b"\n\n") -> bytes:
    return _event("response.output_text.delta", 3, end, output_index=0, item_id="msg_1",
                  content_index=0, delta="Hel", logprobs=[])


def _completed(end: bytes = b"\n\n") -> bytes:
    return _event("response.completed", 4, end,
                  response={**STARTED, "status": "completed", "output": [MESSAGE], "usage": USAGE})


def _proxy_sending(make_upstream, make_proxy, body: bytes, piece: int = 0):  # noqa: F811
    """A proxy before an upstream that streams `body`, in pieces of `piece` bytes if given."""
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for start in range(0, len(body), piece or len(body) or 1):
            await out.write(body[start:start + (piece or len(body))])
            await asyncio.sleep(0.002 if piece else 0)  # each piece a read of its own
        return out  # the chunked body ends properly: no connection error to see

    return make_proxy(make_upstream(answer).url)


def _events_until_error(proxy) -> tuple[list[str], openai.APIError]:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    received = []
    with pytest.raises(openai.APIError) as caught:
        for event in client.responses.create(model=MODEL, input=INPUT, stream=True,
                                             prompt_cache_key="ends"):
            received.append(event.type)
    client.close()
    return received, caught.value


@pytest.mark.parametrize("last_end", [b"\n\n", b"\n", b"\r\n", b"\r"],
                         ids=["blank line", "LF only", "CRLF only", "CR only"])
def test_a_stream_that_ends_before_its_last_event_ends_with_an_error_the_sdk_raises(
        make_upstream, make_proxy, last_end: bytes) -> None:  # noqa: F811
    proxy = _proxy_sending(make_upstream, make_proxy, _opening() + _delta(last_end))
    received, error = _events_until_error(proxy)
    # The last event still reaches the client whole, as an event of its own before the error.
    assert received == ["response.created", "response.output_item.added",
                        "response.content_part.added", "response.output_text.delta"]
    assert "before its last event" in str(error)
    assert error.body["code"] == "upstream_disconnected"
    line = proxy.requests()[-1]
    assert line["status"] == 200
    assert line["upstream_error"] == "upstream ended the stream before its last event"


def test_an_empty_event_stream_ends_with_an_error_the_sdk_raises(make_upstream,  # noqa: F811
                                                                  make_proxy) -> None:
    proxy = _proxy_sending(make_upstream, make_proxy, b"")
    received, error = _events_until_error(proxy)
    assert received == [] and "before its last event" in str(error)


def _streamed_bytes(proxy: Any) -> bytes:
    """The bytes a plain HTTP client gets for a streamed Responses request through `proxy`."""
    with httpx.stream("POST", f"{proxy.base_url}/responses", timeout=20,
                      json={"model": MODEL, "input": INPUT, "stream": True},
                      headers={"authorization": f"Bearer {API_KEY}"}) as answer:
        return answer.read()


@pytest.mark.parametrize("last_end", [b"\n\n", b"\n"], ids=["blank line", "LF only"])
def test_a_stream_that_reaches_its_last_event_gets_nothing_added(make_upstream,  # noqa: F811
                                                                 make_proxy,
                                                                 last_end: bytes) -> None:
    sent = _opening() + _delta() + _completed(last_end)
    proxy = _proxy_sending(make_upstream, make_proxy, sent)
    received = _streamed_bytes(proxy)
    assert received == sent
    assert "upstream_error" not in proxy.requests()[-1]


def test_a_stream_that_ends_in_an_error_event_gets_no_second_one(make_upstream,  # noqa: F811
                                                                make_proxy) -> None:
    error = _event("error", 4, error={"type": "server_error", "code": "server_error",
                                      "message": "The model failed.", "param": None})
    sent = _opening() + _delta() + error
    proxy = _proxy_sending(make_upstream, make_proxy, sent)
    received = _streamed_bytes(proxy)
    assert received == sent
    _, raised = _events_until_error(proxy)
    assert str(raised) == "The model failed."


def test_a_last_event_too_large_to_read_is_not_taken_for_an_early_end(make_upstream,  # noqa: F811
                                                                      make_proxy,
                                                                      monkeypatch) -> None:
    # The relay passes an event larger than its decoder holds on unread (a `response.completed`
    # carrying generated images can be megabytes): it cannot tell it was not the last one.
    monkeypatch.setattr(taps, "SseDecoder", partial(SseDecoder, max_event_bytes=4096))
    sent = _opening() + _delta() + _completed().replace(b'"Hello"', b'"' + b"x" * 8192 + b'"')
    proxy = _proxy_sending(make_upstream, make_proxy, sent, piece=1024)
    received = _streamed_bytes(proxy)
    assert received == sent
    assert "upstream_error" not in proxy.requests()[-1]


def test_an_error_status_sent_as_an_event_stream_gets_nothing_added(make_upstream,  # noqa: F811
                                                                    make_proxy) -> None:
    body = b'data: {"error": {"message": "Overloaded.", "type": "server_error"}}\n\n'

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=503, body=body, content_type="text/event-stream")

    proxy = make_proxy(make_upstream(answer).url)
    answer_ = httpx.post(f"{proxy.base_url}/responses", timeout=20,
                         json={"model": MODEL, "input": INPUT, "stream": True},
                         headers={"authorization": f"Bearer {API_KEY}"})
    assert (answer_.status_code, answer_.content) == (503, body)
    assert "upstream_error" not in proxy.requests()[-1]
