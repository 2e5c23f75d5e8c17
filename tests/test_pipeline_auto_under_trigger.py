"""A request under the trigger is not handed to the compaction flow: `decide` says NONE for
it whatever the checkpoint and hysteresis, and `CompactionFlow.auto` then hands the projection
back as it is. `may_act` is that short way's check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict

from proxy.compaction.trigger import Action, Thresholds, decide, may_act
from proxy.conversation import Api
from proxy.records import CompactionEvent
from proxy.server.pipeline import Pipeline
from proxy.server.prepared import Attempt
from proxy.server.request_line import RequestLine
from proxy.threads import ThreadIdentity
from tests.harness import started_pipeline

_counts = st.integers(min_value=0, max_value=400_000)


@st.composite
def _thresholds(draw: st.DrawFn) -> Thresholds:
    limit = draw(st.integers(min_value=1, max_value=300_000))
    return Thresholds(draw(st.integers(min_value=0, max_value=limit)), limit,
                      draw(st.none() | _counts), draw(st.none() | st.integers(0, 20)),
                      draw(st.booleans()), draw(_counts))


_events = st.none() | st.builds(
    lambda after, trigger: CompactionEvent(cutoff_index=1, cutoff_message_id=None,
                                           prefix_digest="p", summary_message={},
                                           tokens_after=after, trigger=trigger),
    _counts, _counts)


@given(_counts, _thresholds(), _events, st.floats(0, 1), st.booleans())
def test_a_request_may_act_unless_decide_says_none(estimate: int, th: Thresholds,
                                                    event: CompactionEvent | None,
                                                    rearm_ratio: float, forced: bool) -> None:
    decided = decide(estimate, th, event, rearm_ratio, forced=forced)
    assert may_act(estimate, th, forced=forced) or decided.action is Action.NONE


@pytest.fixture
async def pipeline(tmp_path: Path) -> Any:
    async with started_pipeline(str(tmp_path),
                                models={"small*": {"max_input_tokens": 400}}) as made:
        yield made


async def _asked(pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, model: str, text: str,
                 attempt: Attempt = Attempt()) -> list[int]:
    asked: list[int] = []

    async def auto(prepared: Any, view: Any, situation: Any, state: Any, built: Any,
                   line: Any) -> Any:
        asked.append(built.tokens)
        return built

    monkeypatch.setattr(pipeline.flow, "auto", auto)
    identity = ThreadIdentity("thread-1", "header:x-thread-id", "tenant-1")
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    inbound = pipeline.parse(Api.CHAT, body, identity)
    await pipeline.prepare(inbound, identity, pipeline.settings.upstreams["up"],
                           RequestLine(None, None, "chat"), CIMultiDict(), attempt)
    return asked


async def test_only_a_request_over_the_trigger_is_handed_to_the_flow(
        pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await _asked(pipeline, monkeypatch, "small-model", "Say hello.") == []
    [tokens] = await _asked(pipeline, monkeypatch, "small-model", "word " * 2_000)
    assert tokens > pipeline.estimators.thresholds("small-model", 0).trigger
    # The overflow retry's compaction is forced: asked whatever the estimate.
    assert len(await _asked(pipeline, monkeypatch, "small-model", "Say hello.",
                            Attempt(forced=True, reason="context_overflow"))) == 1
