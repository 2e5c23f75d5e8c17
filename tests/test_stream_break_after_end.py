"""An upstream whose connection breaks, or goes silent, after the answer's last event: the
client has the whole answer, so the stream ends cleanly there. An error event after
`response.completed` made the SDK, which reads a Responses stream to its end, raise on a
complete answer."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from tests.conftest import API_KEY
from tests.test_responses_stream_ends import _completed, _delta, _opening
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import ANSWER, DONE, USAGE, USER, _chunk

ENDS = ["broken", "silent"]


def _ending(body: bytes, end: str) -> Any:
    """An upstream that sends `body`, then breaks its connection or stays silent."""
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        await out.write(body)
        await asyncio.sleep(0.1 if end == "broken" else 2)  # past the proxy's timeout_s
        if request.transport is not None:
            request.transport.abort()
        return out
    return answer


def _proxy(make_upstream, make_proxy, body: bytes, end: str) -> Any:  # noqa: F811
    return make_proxy(make_upstream(_ending(body, end)).url,
                      upstreams={"fake": {"timeout_s": 0.5}})


@pytest.mark.parametrize("end", ENDS)
def test_a_responses_stream_broken_after_its_last_event_ends_cleanly(make_upstream,  # noqa: F811
                                                                     make_proxy,
                                                                     end: str) -> None:
    proxy = _proxy(make_upstream, make_proxy, _opening() + _delta() + _completed(), end)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    events = [e.type for e in client.responses.create(model="gpt-4o", input=USER, stream=True)]
    client.close()
    assert events[-2:] == ["response.output_text.delta", "response.completed"]
    line = proxy.requests()[-1]
    assert line["usage_input"] == 9 and line["upstream_error"].endswith("after the answer's end")


@pytest.mark.parametrize("end", ENDS)
def test_a_chat_stream_broken_after_done_gets_no_error_frame(make_upstream,  # noqa: F811
                                                             make_proxy, end: str) -> None:
    sent = ANSWER + _chunk([], USAGE) + DONE
    proxy = _proxy(make_upstream, make_proxy, sent, end)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "messages": USER, "stream": True,
                            "stream_options": {"include_usage": True}}) as answer:
        assert answer.read() == sent
    assert proxy.requests()[-1]["usage_input"] == 11


@pytest.mark.parametrize("end", ENDS)
def test_a_stream_broken_before_its_last_event_still_ends_with_an_error(make_upstream,  # noqa: F811
                                                                        make_proxy,
                                                                        end: str) -> None:
    proxy = _proxy(make_upstream, make_proxy, _opening() + _delta(), end)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with pytest.raises(openai.APIError, match="mid-stream"):
        list(client.responses.create(model="gpt-4o", input=USER, stream=True))
    client.close()
    assert "usage_input" not in proxy.requests()[-1]


@pytest.mark.parametrize("end", ENDS)
def test_a_cr_framed_chat_stream_broken_after_done_ends_cleanly(make_upstream,  # noqa: F811
                                                                make_proxy, end: str) -> None:
    # CR line ends (SSE allows them): `[DONE]`'s blank line ends in a CR, the read's last byte,
    # which must not wait for an LF that never comes.
    sent = (ANSWER + _chunk([], USAGE) + DONE).replace(b"\n", b"\r")
    proxy = _proxy(make_upstream, make_proxy, sent, end)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "messages": USER, "stream": True}) as answer:
        got = answer.read()
    assert got.endswith(b"data: [DONE]\r\r") and b"error" not in got
    assert b'"choices": []' not in got  # the usage chunk the client did not ask for
    line = proxy.requests()[-1]
    assert line["usage_input"] == 11 and line["upstream_error"].endswith("after the answer's end")
