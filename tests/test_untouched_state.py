"""The thread's state closes the short way (`proxy/server/untouched.py`): a checkpoint, a
microcompaction mark or an anchor can apply to a list however plain and short, so a request of
such a thread goes the whole way; a thread with none of them, or no thread at all, does not."""

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
from tests.harness import started_pipeline
from tests.store_backends import anchor, event, mark

IDENTITY = ThreadIdentity("thread-1", "header:x-thread-id", "tenant-1")
NO_THREAD = ThreadIdentity(None, None, "tenant-1")
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Say hello."}]})


async def _prepared(pipeline: Pipeline, identity: ThreadIdentity) -> tuple[Any, RequestLine]:
    line = RequestLine(None, None, "chat")
    inbound = pipeline.parse(Api.CHAT, BODY, identity)
    prepared = await pipeline.prepare(inbound, identity, pipeline.settings.upstreams["up"], line,
                                      CIMultiDict({"Authorization": "Bearer sk-x"}))
    return prepared, line


async def test_a_thread_with_nothing_that_applies_takes_the_short_way(tmp_path: Path) -> None:
    async with started_pipeline(str(tmp_path)) as pipeline:
        # A model whose tokenizer is not loaded yet goes the whole way, which loads it (the
        # short way reads the answer's usage with it).
        first, _ = await _prepared(pipeline, NO_THREAD)
        assert not first.untouched
        for identity in (IDENTITY, NO_THREAD):
            prepared, line = await _prepared(pipeline, identity)
            assert prepared.untouched and prepared.body is BODY
            assert line.fields["tokens_at_most"] == len(BODY)
            assert "tokens_estimate" not in line.fields
        key = pipeline.thread_key(IDENTITY)
        assert key is not None
        state = pipeline.store.cached(key)
        assert state is not None and state.last_activity is not None and not state.anchors


@pytest.mark.parametrize("planted", ["checkpoint", "mark", "anchor"])
async def test_a_thread_holding_state_that_may_apply_goes_the_whole_way(tmp_path: Path,
                                                                      planted: str) -> None:
    async with started_pipeline(str(tmp_path)) as pipeline:
        key = pipeline.thread_key(IDENTITY)
        assert key is not None
        await pipeline.store.load(key)
        if planted == "checkpoint":
            await pipeline.store.add_event(key, event(1))
        elif planted == "mark":
            await pipeline.store.set_microcompact(key, mark(1))
        else:
            pipeline.store.add_anchor(key, anchor(1))
        await pipeline.estimators.loaded("m")
        prepared, line = await _prepared(pipeline, IDENTITY)
        assert not prepared.untouched
        assert "tokens_estimate" in line.fields and "tokens_at_most" not in line.fields


async def test_a_thread_the_store_holds_but_the_cache_does_not_is_read_first(
        tmp_path: Path) -> None:
    # A restart: the checkpoint is in SQLite only, and the short way must not miss it.
    async with started_pipeline(str(tmp_path)) as pipeline:
        key = pipeline.thread_key(IDENTITY)
        assert key is not None
        await pipeline.store.load(key)
        await pipeline.store.add_event(key, event(1))
    async with started_pipeline(str(tmp_path)) as reopened:
        await reopened.estimators.loaded("m")
        assert reopened.store.cached(key) is None
        prepared, _ = await _prepared(reopened, IDENTITY)
        assert not prepared.untouched


def _with_tools(enum: list[int]) -> bytes:
    tools = [{"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "enum": enum}}}}}]
    return orjson.dumps({"model": "m", "tools": tools,
                         "messages": [{"role": "user", "content": "Pick one."}]})


@pytest.mark.parametrize("items", [3, 2_000])
async def test_tool_definitions_are_counted_as_the_whole_way_counts_them(tmp_path: Path,
                                                                         items: int) -> None:
    """An enum item costs a few tokens however few its bytes: 2,000 one-digit items are some
    4 KB and 8,000 tokens, which a bound on bytes alone would miss."""
    body = _with_tools([n % 10 for n in range(items)])
    models = {"m": {"max_input_tokens": 13_000}}  # trigger 9,750
    async with started_pipeline(str(tmp_path), models=models) as pipeline:
        await pipeline.estimators.loaded("m")
        assert len(body) * 2 <= 9_750
        line = RequestLine(None, None, "chat")
        inbound = pipeline.parse(Api.CHAT, body, IDENTITY)
        prepared = await pipeline.prepare(inbound, IDENTITY, pipeline.settings.upstreams["up"],
                                          line, CIMultiDict({"Authorization": "Bearer sk-x"}))
        if items == 3:
            assert prepared.untouched, "a few tools are counted and leave room"
        else:
            assert not prepared.untouched
            assert line.fields["tokens_estimate"] > 9_750 * 0.75, "the whole way counts them"


OVERFLOW = orjson.dumps({"error": {
    "message": "This model's maximum context length is 100 tokens. However, your messages "
               "resulted in 120 tokens. Please reduce the length of the messages.",
    "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}})


@pytest.mark.parametrize(("status", "body", "retried"), [
    (429, b'{"error": {"message": "Rate limit reached", "type": "requests", "code": null}}', False),
    (500, b'{"error": {"message": "The server had an error", "type": "server_error"}}', False),
    (400, b'{"error": {"message": "bad", "type": "invalid_request_error"}}', False),
    (400, OVERFLOW, True),
])
async def test_a_rejection_no_retry_answers_reads_no_state(tmp_path: Path, monkeypatch,
                                                           status: int, body: bytes,
                                                           retried: bool) -> None:
    """The upstream's 429 or 500 is relayed as the whole way relays it, without reading the
    thread's state (which a Redis outage would turn into the proxy's own 503); an overflow is
    prepared the whole way for its compaction."""
    async with started_pipeline(str(tmp_path)) as pipeline:
        await pipeline.estimators.loaded("m")
        prepared, line = await _prepared(pipeline, IDENTITY)
        assert prepared.untouched
        class Prepared(Exception):
            """The whole way's preparation was asked for (what follows it is another test's)."""

        async def prepare(*args: Any, **kwargs: Any) -> Any:
            raise Prepared

        monkeypatch.setattr(pipeline, "prepare", prepare)
        if retried:
            with pytest.raises(Prepared):
                await pipeline.retry(prepared, status, orjson.loads(body), line)
        else:
            assert await pipeline.retry(prepared, status, orjson.loads(body), line) is None
