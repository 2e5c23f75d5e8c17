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
