"""An answer's anchor is written to the store once the context it reports reaches half the
request's trigger; below that it is kept in the process's cache alone (`usage_record`), and
over a shared store, which caches nothing, it is written all the same."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest
from multidict import CIMultiDict

from proxy.conversation import Api
from proxy.server.pipeline import Pipeline
from proxy.server.request_line import RequestLine
from proxy.store.cached import CachedStore
from proxy.store.redis_store import RedisStore
from proxy.threads import ThreadIdentity
from tests.harness import started_pipeline
from tests.redis_fixtures import redis_store  # noqa: F401
from tests.store_backends import KEY, anchor

IDENTITY = ThreadIdentity("thread-1", "header:x-thread-id", "tenant-1")
# Trigger 60 (0.75 of 80): an answer reporting 30 tokens of context or more is written.
MODELS = {"m": {"max_input_tokens": 80}}
BODY = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "Say hello."}]})


def _answer(prompt: int, completion: int, reasoning: int = 0) -> bytes:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if reasoning:
        usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return orjson.dumps({
        "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "Hello."}}],
        "usage": usage})


async def _answered(pipeline: Pipeline, answer: bytes, body: bytes = BODY) -> None:
    inbound = pipeline.parse(Api.CHAT, body, IDENTITY)
    prepared = await pipeline.prepare(inbound, IDENTITY, pipeline.settings.upstreams["up"],
                                      RequestLine(None, None, "chat"),
                                      CIMultiDict({"Authorization": "Bearer sk-x"}))
    pipeline.finish_body(prepared, answer, 200, RequestLine(None, None, "chat"))


def _cached(pipeline: Pipeline) -> list[tuple[int, int]]:
    key = pipeline.thread_key(IDENTITY)
    assert key is not None
    state = pipeline.store.cached(key)
    assert state is not None
    return [(a.input_tokens, a.output_tokens) for a in state.anchors]


async def _stored(pipeline: Pipeline, state_path: Path) -> list[tuple[int, int]]:
    await pipeline.store.flush()
    with sqlite3.connect(state_path / "state.db") as conn:
        rows = conn.execute("SELECT data FROM anchors ORDER BY id").fetchall()
    return [(d["input_tokens"], d["output_tokens"]) for d in map(orjson.loads, (r[0] for r in rows))]


@pytest.mark.parametrize(("prompt", "completion", "reasoning", "written"), [
    (12, 2, 0, False),   # far below
    (27, 2, 0, False),   # 29: one short of half the trigger
    (28, 2, 0, True),    # 30: half the trigger
    (40, 30, 0, True),   # over it
    (20, 15, 6, False),  # 29: reasoning tokens do not come back as context
    (21, 15, 6, True),   # 30
])
async def test_an_anchor_is_written_from_half_the_trigger(
        tmp_path: Path, prompt: int, completion: int, reasoning: int, written: bool) -> None:
    async with started_pipeline(str(tmp_path), models=MODELS) as pipeline:
        await _answered(pipeline, _answer(prompt, completion, reasoning))
        # Kept for this process's next estimate either way.
        assert _cached(pipeline) == [(prompt, completion - reasoning)]
        assert await _stored(pipeline, tmp_path) == ([(prompt, completion - reasoning)]
                                                     if written else [])


async def test_a_thread_below_half_its_trigger_starts_without_its_anchor_after_a_restart(
        tmp_path: Path) -> None:
    async with started_pipeline(str(tmp_path), models=MODELS) as pipeline:
        await _answered(pipeline, _answer(12, 2))
        await _answered(pipeline, _answer(40, 2))
        await _answered(pipeline, _answer(14, 2))  # the client went back to a short list
        assert _cached(pipeline) == [(14, 2), (40, 2), (12, 2)]
    async with started_pipeline(str(tmp_path), models=MODELS) as reopened:
        key = reopened.thread_key(IDENTITY)
        assert key is not None
        state = await reopened.store.load(key)
        assert [(a.input_tokens, a.output_tokens) for a in state.anchors] == [(40, 2)]


async def test_the_trigger_is_the_requests_own_with_its_output_reserved(tmp_path: Path) -> None:
    # A 100-token window of which the request reserves 60 for output: 40 of input, trigger 30,
    # so 15 tokens of context are half of it (the model's whole window would ask for 37).
    models = {"m": {"context_window": 100}}
    body = orjson.dumps({"model": "m", "max_tokens": 60,
                         "messages": [{"role": "user", "content": "Say hello."}]})
    async with started_pipeline(str(tmp_path), models=models) as pipeline:
        await _answered(pipeline, _answer(13, 2), body)
        assert await _stored(pipeline, tmp_path) == [(13, 2)]


async def test_over_a_shared_store_a_kept_anchor_is_written(redis_store: RedisStore) -> None:  # noqa: F811
    # Nothing is cached over Redis: the store's copy is the anchor's only one.
    cached = CachedStore(redis_store)
    cached.keep_anchor(KEY, anchor(1))
    await cached.written(KEY)
    assert (await redis_store.load(KEY)).anchors == (anchor(1),)
