"""`finish_body` and `finish_stream` record an answer's usage before they return: plain calls,
so nothing can run between the client's answer and its anchor (the next turn finds it), and
the handler's guard around them sees every failure of the recording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from multidict import CIMultiDict

from proxy.conversation import Api
from proxy.server.pipeline import Pipeline
from proxy.server.request_line import RequestLine
from proxy.threads import ThreadIdentity
from tests.harness import COUNTED, started_pipeline

IDENTITY = ThreadIdentity("thread-1", "header:x-thread-id", "tenant-1")
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Say hello."}]})
ANSWER = orjson.dumps({
    "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "finish_reason": "stop",
                 "message": {"role": "assistant", "content": "Hello."}}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 2, "total_tokens": 14}})
STREAM = (b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
          b'"delta":{"role":"assistant","content":"Hello."},"finish_reason":null}]}\n\n'
          b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,'
          b'"delta":{},"finish_reason":"stop"}]}\n\n'
          b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],'
          b'"usage":{"prompt_tokens":12,"completion_tokens":2,"total_tokens":14}}\n\n'
          b'data: [DONE]\n\n')


@pytest.fixture
async def pipeline(tmp_path: Path) -> Any:
    async with started_pipeline(str(tmp_path), tokens=COUNTED) as made:
        yield made


async def _prepared(pipeline: Pipeline, body: bytes) -> Any:
    inbound = pipeline.parse(Api.CHAT, body, IDENTITY)
    return await pipeline.prepare(inbound, IDENTITY, pipeline.settings.upstreams["up"],
                                  RequestLine(None, None, "chat"),
                                  CIMultiDict({"Authorization": "Bearer sk-x"}))


def _anchors(pipeline: Pipeline) -> tuple[Any, ...]:
    key = pipeline.thread_key(IDENTITY)
    assert key is not None
    state = pipeline.store.cached(key)
    return state.anchors if state is not None else ()


async def test_finish_body_has_recorded_the_anchor_when_it_returns(pipeline: Pipeline) -> None:
    prepared = await _prepared(pipeline, BODY)
    line = RequestLine(None, None, "chat")
    assert pipeline.finish_body(prepared, ANSWER, 200, line) is None
    [anchor] = _anchors(pipeline)
    assert (anchor.input_tokens, anchor.output_tokens) == (12, 2)
    assert line.fields["usage_input"] == 12


async def test_finish_stream_has_recorded_the_anchor_when_it_returns(pipeline: Pipeline) -> None:
    body = orjson.dumps({**orjson.loads(BODY), "stream": True})
    prepared = await _prepared(pipeline, body)
    tap = prepared.stream_tap()
    tap.feed(STREAM)
    tap.flush()
    line = RequestLine(None, None, "chat")
    assert pipeline.finish_stream(prepared, tap, 200, line) is None
    [anchor] = _anchors(pipeline)
    assert (anchor.input_tokens, anchor.output_tokens) == (12, 2)


async def test_a_failing_recording_raises_from_the_call(pipeline: Pipeline,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The handler's `_recorded` turns this into `usage_not_recorded`: it must see it raised.
    prepared = await _prepared(pipeline, BODY)

    def broken(*args: Any) -> None:
        raise RuntimeError("store went away")

    # Whichever way the anchor is kept: written (`add_anchor`) or in the cache alone.
    monkeypatch.setattr(pipeline.store, "add_anchor", broken)
    monkeypatch.setattr(pipeline.store, "keep_anchor", broken)
    with pytest.raises(RuntimeError):
        pipeline.finish_body(prepared, ANSWER, 200, RequestLine(None, None, "chat"))
