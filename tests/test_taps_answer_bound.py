"""What a stream tap rebuilds of an answer stays bounded whatever the upstream sends: measured as
the stream goes, an answer past the bound is forgotten (it anchors nothing: `usage_ignored:
answer_too_large`) while the client still gets every byte, and a usage chunk it did not ask for
stays hidden. Measuring joins the text pieces so far; the answer rebuilt is the same. The bounds
are lowered here: the real ones measure every 16 MiB relayed, past 64 Mi characters."""

from __future__ import annotations

import json

import openai
import pytest

from proxy.server import taps
from proxy.server.taps import ChatTap, ResponsesTap
from tests.conftest import API_KEY
from tests.test_responses_stream_ends import MESSAGE, STARTED, USAGE, _event
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_oversized_events import _streaming
from tests.test_stream_usage_capture import DONE, USER, _chunk, _delta, _lines

LIMIT = 64 * 1024
CHAT_USAGE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}


@pytest.fixture
def small_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(taps, "_MEASURE_EVERY", 4096)
    monkeypatch.setattr(taps, "_ANSWER_CHARS", LIMIT)


def _long_answer(pieces: int) -> list[bytes]:
    return [_chunk([_delta({"role": "assistant", "content": ""})]),
            *(_chunk([_delta({"content": f"{n:07d} "})]) for n in range(pieces)),
            _chunk([_delta({}, "stop")]), _chunk([], CHAT_USAGE), DONE]


def test_a_chat_answer_past_the_bound_is_forgotten_and_the_client_gets_it_all(
        small_bounds: None) -> None:
    events = _long_answer(4 * LIMIT // 8)  # four times the bound, in 8-character pieces
    tap = ChatTap(hide_usage=True)
    out, rebuilt = [], []
    for event in events:
        out.append(tap.feed(event))
        rebuilt.append(len((tap.response() or {}).get("content") or ""))
    out.append(tap.flush())
    assert b"".join(out) == b"".join(e.replace(b', "usage": null', b"") for e in events
                                     if b'"prompt_tokens"' not in e)
    assert max(rebuilt) <= LIMIT + 4096 and rebuilt[-1] == 0
    assert tap.unread == "answer_too_large" and tap.hidden == 1
    assert tap.complete and tap.usage() == CHAT_USAGE


def test_measuring_an_answer_under_the_bound_leaves_it_as_rebuilt(small_bounds: None) -> None:
    call = {"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "write", "arguments": ""}}
    events = [_chunk([_delta({"role": "assistant", "tool_calls": [call]}),
                      _delta({"role": "assistant", "content": ""}, index=1)])]
    for n in range(3000):
        events.append(_chunk([_delta({"tool_calls": [{"index": 0, "function": {
            "arguments": f'{{"n": {n}}}'[n % 2::2]}}]}), _delta({"content": f"{n} "}, index=1)]))
    events += [_chunk([_delta({}, "stop"), _delta({}, "stop", index=1)]), DONE]
    measured, unmeasured = ChatTap(hide_usage=False), ChatTap(hide_usage=False)
    unmeasured._measure_at = 1 << 62
    for event in events:
        assert measured.feed(event) == unmeasured.feed(event)
    assert measured.forwarded > 10 * taps._MEASURE_EVERY
    assert measured.stream.messages() == unmeasured.stream.messages()
    assert measured.unread is None and measured.complete


def test_responses_items_past_the_bound_are_forgotten(small_bounds: None) -> None:
    tap = ResponsesTap()
    text = "y" * (LIMIT // 4)
    items = [{**MESSAGE, "id": f"msg_{n}",
              "content": [{"type": "output_text", "text": text, "annotations": []}]}
             for n in range(8)]
    stream = [_event("response.created", 0, response=STARTED)]
    stream += [_event("response.output_item.done", n + 1, output_index=n, item=item)
               for n, item in enumerate(items)]
    stream.append(_event("response.completed", 9, response={
        **STARTED, "status": "completed", "output": [MESSAGE], "usage": USAGE}))
    assert b"".join(tap.feed(event) for event in stream) == b"".join(stream)
    assert len(json.dumps(tap.response())) < LIMIT and tap.unread == "answer_too_large"
    assert tap.complete and tap.usage() == USAGE


def test_a_chat_answer_past_the_bound_through_the_proxy(make_upstream, make_proxy,  # noqa: F811
                                                        small_bounds: None) -> None:
    events = _long_answer(2 * LIMIT // 8)
    proxy = make_proxy(make_upstream(_streaming(b"".join(events), piece=1 << 20)).url)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True,
                                                 extra_headers={"x-thread-id": "t"}))
    client.close()
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == "".join(f"{n:07d} " for n in range(2 * LIMIT // 8))
    assert all(c.usage is None for c in chunks)
    [line] = _lines(proxy, 1)
    assert line["usage_ignored"] == "answer_too_large" and "usage_input" not in line

