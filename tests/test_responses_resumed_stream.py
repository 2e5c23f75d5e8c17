"""A background response's stream resumed by id (`client.responses.retrieve(id, stream=True,
starting_after=n)`, `GET /v1/responses/{id}?stream=true`) is a pass-through, but a Responses
event stream all the same: one the upstream breaks off, or ends before its last event, ends for
the client with an `error` event the SDK raises with the proxy's explanation, as a stream made
by `POST /v1/responses` does, not with a bare connection failure or a quiet end."""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

RESPONSE = {"id": "resp_bg", "object": "response", "created_at": 1, "model": "gpt-5",
            "status": "completed", "output": [], "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "usage": None, "background": True}


def _event(kind: str, sequence: int, **fields: Any) -> bytes:
    data = json.dumps({"type": kind, "sequence_number": sequence, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


DELTAS = b"".join(_event("response.output_text.delta", n, item_id="msg_1", output_index=0,
                         content_index=0, delta="lo", logprobs=[]) for n in (4, 5))


def _resumed(end: str):
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        if end == "nothing left":
            return out
        await out.write(DELTAS)
        if end == "completed":
            await out.write(_event("response.completed", 6, response=RESPONSE))
        elif end == "broken":
            await asyncio.sleep(0.05)
            assert request.transport is not None
            request.transport.close()
        return out
    return answer


def _resume(proxy) -> tuple[list[int], Exception | None]:
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    seen: list[int] = []
    try:
        for event in client.responses.retrieve("resp_bg", stream=True, starting_after=3):
            seen.append(event.sequence_number)
    except openai.APIError as exc:
        return seen, exc
    finally:
        client.close()
    return seen, None


@pytest.mark.parametrize("end, told", [("broken", "failed mid-stream"),
                                       ("early", "before its last event")])
def test_a_resumed_stream_cut_short_ends_with_an_error_event(make_upstream,  # noqa: F811
                                                             make_proxy, end: str,
                                                             told: str) -> None:
    proxy = make_proxy(make_upstream(_resumed(end)).url)
    seen, error = _resume(proxy)
    assert seen == [4, 5]
    assert error is not None and not isinstance(error, openai.APIConnectionError)
    assert told in str(error) and error.body["code"] == "upstream_disconnected"
    line = proxy.requests()[-1]
    assert line["status"] == 200 and line.get("passthrough") is True and line["upstream_error"]


def test_a_resumed_stream_that_ends_whole_is_relayed_as_it_came(make_upstream,  # noqa: F811
                                                                make_proxy) -> None:
    proxy = make_proxy(make_upstream(_resumed("completed")).url)
    assert _resume(proxy) == ([4, 5, 6], None)
    assert "upstream_error" not in proxy.requests()[-1]


def test_a_compressed_resumed_stream_cut_short_goes_as_it_came(make_upstream,  # noqa: F811
                                                               make_proxy) -> None:
    packer = zlib.compressobj(wbits=31)  # gzip
    sent = packer.compress(DELTAS) + packer.flush(zlib.Z_SYNC_FLUSH)

    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                          "Content-Encoding": "gzip"})
        await out.prepare(request)
        await out.write(sent)
        return out

    proxy = make_proxy(make_upstream(answer).url)
    with httpx.stream("GET", f"{proxy.base_url}/responses/resp_bg?stream=true", timeout=20,
                      headers={"accept-encoding": "gzip"}) as resumed:
        received = b"".join(resumed.iter_raw())
    assert received == sent


def test_a_client_that_leaves_a_resumed_stream_is_a_499_saying_how_far_it_read(
        make_upstream, make_proxy) -> None:  # noqa: F811
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(DELTAS)
        await asyncio.sleep(1)  # the client leaves meanwhile
        return out

    proxy = make_proxy(make_upstream(answer).url)
    with httpx.stream("GET", f"{proxy.base_url}/responses/resp_bg?stream=true",
                      timeout=20) as resumed:
        received = next(resumed.iter_raw())
    deadline = time.monotonic() + 5
    while not proxy.requests() and time.monotonic() < deadline:
        time.sleep(0.02)
    line = proxy.requests()[-1]
    assert line["status"] == 499 and line["bytes_out"] == len(received) == len(DELTAS)


def test_a_resumed_stream_with_nothing_after_starting_after_ends_quietly(make_upstream,  # noqa: F811
                                                                         make_proxy) -> None:
    # Resumed after its last event (the client had it already): there is nothing to send.
    proxy = make_proxy(make_upstream(_resumed("nothing left")).url)
    assert _resume(proxy) == ([], None)
    assert "upstream_error" not in proxy.requests()[-1]
