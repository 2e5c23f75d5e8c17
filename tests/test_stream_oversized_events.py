"""A streamed answer with an event too large for the relay's decoder to hold, through the proxy.

The decoder gives up on such an event (one endless line, or one gigantic event) at its bound:
from then on the relay passes its bytes to the client as they come, holding nothing more of it,
and reads the events after it as usual, so a usage chunk the client did not ask for stays
hidden. The answer was not read whole, so it anchors nothing, and the request's line says why
(`usage_ignored: event_too_large`). The decoder's bound is lowered here; the real one is 16 MiB.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai
import pytest
from aiohttp import web

from proxy.server import taps
from proxy.sse import SseDecoder
from tests.conftest import API_KEY
from tests.test_responses_stream_ends import MESSAGE, MODEL, STARTED, USAGE, _event
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import DONE, USER, _chunk, _delta, _lines

BOUND = 16 * 1024
BIG = "x" * (16 * BOUND)
CHAT_USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}


@pytest.fixture
def held(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[int]]:
    """What the relay's decoder (the real one, its bound lowered) holds after each read, apart
    for the reads that came while it was skipping an event too large to hold; the reads' sizes."""
    notes: dict[str, list[int]] = {"skipping": [], "reading": [], "reads": []}

    class Probe(SseDecoder):
        def __init__(self) -> None:
            super().__init__(BOUND)

        def feed(self, chunk: bytes) -> list[Any]:
            events = super().feed(chunk)
            notes["skipping" if self.skipping else "reading"].append(self.held)
            notes["reads"].append(len(chunk))
            return events

    monkeypatch.setattr(taps, "SseDecoder", Probe)
    return notes


def _streaming(*writes: bytes, piece: int = 4096, abort: bool = False,
               ) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """An upstream that streams `writes`, each in pieces of `piece` bytes read one by one, then
    ends its body (or, with `abort`, drops the connection)."""
    async def answer(request: web.Request) -> web.StreamResponse:
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for data in writes:
            for start in range(0, len(data), piece):
                await out.write(data[start:start + piece])
                await asyncio.sleep(0.001)
        if abort:
            assert request.transport is not None
            request.transport.abort()
        return out
    return answer


def _assert_held_bounded(held: dict[str, list[int]]) -> None:
    assert held["skipping"] and max(held["skipping"]) <= 1
    assert max(held["reading"]) <= BOUND + max(held["reads"])  # the bound, and a read past it


CHAT_ANSWER = (_chunk([_delta({"role": "assistant", "content": "Hel"})]),
               _chunk([_delta({"content": BIG})]), _chunk([_delta({"content": "lo"}, "stop")]),
               _chunk([], CHAT_USAGE), DONE)


def test_a_chat_event_too_large_to_hold_reaches_the_client_and_anchors_nothing(
        make_upstream, make_proxy, held) -> None:  # noqa: F811
    proxy = make_proxy(make_upstream(_streaming(*CHAT_ANSWER)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    messages: list[Any] = list(USER)
    for _ in range(2):
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages,
                                                     stream=True,
                                                     extra_headers={"x-thread-id": "t"}))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert text == "Hel" + BIG + "lo"
        assert all(c.usage is None for c in chunks)  # the usage chunk after it stays hidden
        messages += [{"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
    client.close()
    first, second = _lines(proxy, 2)
    assert first["usage_ignored"] == "event_too_large" and first["usage_chunk_hidden"] is True
    assert "usage_input" not in first and "upstream_error" not in first
    assert second["anchor_used"] is False
    _assert_held_bounded(held)


def test_a_client_that_asked_for_usage_still_gets_it(make_upstream, make_proxy,  # noqa: F811
                                                     held) -> None:
    proxy = make_proxy(make_upstream(_streaming(*CHAT_ANSWER)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True,
                                                 stream_options={"include_usage": True}))
    client.close()
    assert [c.usage.prompt_tokens for c in chunks if c.usage] == [11]
    assert proxy.requests()[-1]["usage_ignored"] == "event_too_large"


@pytest.mark.parametrize("end", ["clean", "broken"])
def test_an_endless_line_passes_as_it_comes_then_the_error_frame_an_sdk_reads(
        make_upstream, make_proxy, held, end: str) -> None:  # noqa: F811
    opening = _chunk([_delta({"role": "assistant", "content": "Hel"})])
    endless = b'data: {"choices": [{"index": 0, "delta": {"content": "' + b"x" * (64 * BOUND)
    proxy = make_proxy(make_upstream(_streaming(opening, endless, abort=end == "broken")).url)
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": "gpt-4o", "messages": USER, "stream": True},
                      headers={"authorization": f"Bearer {API_KEY}"}) as answer:
        received = answer.read()
    # Every byte of the line as sent; the error frame after it is an event of its own.
    opened = opening.replace(b', "usage": null', b"")
    assert received.startswith(opened + endless)
    decoder = SseDecoder()
    events = decoder.feed(received) + decoder.flush()
    assert [e.raw for e in events[:2]] == [opened, endless + b"\n\n"]
    assert events[-1].json()["error"]["code"] == "upstream_disconnected"
    error = proxy.requests()[-1]["upstream_error"]
    assert (error == "upstream ended the stream inside an event") is (end == "clean") and error
    _assert_held_bounded(held)


@pytest.mark.parametrize("first", ["item", "delta"])
def test_a_responses_event_too_large_to_hold_reaches_the_client_and_anchors_nothing(
        make_upstream, make_proxy, held, first: str) -> None:  # noqa: F811
    # A `response.completed` repeats the whole output: a long answer makes its largest event.
    # Without `output_item.added`, the big delta is the first event the handler's peek (which
    # looks for an early error) waits for: the relay gets it from the peek's reads.
    message = {**MESSAGE, "content": [{"type": "output_text", "text": BIG, "annotations": []}]}
    added = _event("response.output_item.added", 1, output_index=0,
                   item={**MESSAGE, "status": "in_progress", "content": []})
    events = (_event("response.created", 0, response=STARTED), added if first == "item" else b"",
              _event("response.output_text.delta", 2, output_index=0, item_id="msg_1",
                     content_index=0, delta=BIG, logprobs=[]),
              _event("response.output_item.done", 3, output_index=0, item=message),
              _event("response.completed", 4, response={**STARTED, "status": "completed",
                                                        "output": [message], "usage": USAGE}))
    proxy = make_proxy(make_upstream(_streaming(*events)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    received = list(client.responses.create(model=MODEL, input=USER, stream=True,
                                            prompt_cache_key="big"))
    client.close()
    assert [e.type for e in received][-1] == "response.completed"
    assert received[-1].response.output_text == BIG
    line = proxy.requests()[-1]
    assert line["usage_ignored"] == "event_too_large" and "usage_input" not in line
    assert "upstream_error" not in line
    _assert_held_bounded(held)
