"""What the pipeline tells the cascade about a thread: each field of `Situation` from the
thread's state, the attempt and the clock (built positionally on the hot path: the order
matters)."""

from __future__ import annotations

from pathlib import Path

import orjson

from proxy.anchors import NO_SIZES
from proxy.conversation import Api
from proxy.core.sanitize import Policy
from proxy.inbound import parse_inbound
from proxy.records import Anchor, MicrocompactMark, ThreadKey, ThreadState
from proxy.server.pipeline import Pipeline
from proxy.server.prepared import Attempt
from proxy.settings import parse_settings

BODY = orjson.dumps({"model": "gpt-4o", "max_tokens": 500,
                     "messages": [{"role": "user", "content": "Say hello."}]})


def test_each_field_comes_from_its_source(tmp_path: Path) -> None:
    settings = parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
                               "state": {"path": str(tmp_path)}}, {})
    pipeline = Pipeline(settings, clock=lambda: 1234.5)
    inbound = parse_inbound(Api.CHAT, BODY)
    estimator = pipeline.estimators.estimator("gpt-4o")
    mark = MicrocompactMark("m7", 7, 99.0)
    anchor = Anchor(("r",), 2, "p", 100, 5)
    state = ThreadState(ThreadKey("t", "th"), created_at=1.0, last_activity=1200.0,
                        anchors=(anchor,), microcompact=mark)
    attempt = Attempt(policy=Policy.PRIVATE_FREE, keep_loop=True)

    situation = pipeline._situation(inbound, "tenant", estimator, state, attempt)

    assert situation.settings is settings.compaction
    assert situation.estimator is estimator and situation.identities is pipeline.identities
    assert situation.thresholds == pipeline.estimators.thresholds("gpt-4o", 500)
    assert (situation.now, situation.last_activity) == (1234.5, 1200.0)
    assert (situation.mark, situation.anchors) == (mark, (anchor,))
    assert (situation.policy, situation.keep_loop) == (Policy.PRIVATE_FREE, True)

    assert situation.references is NO_SIZES  # a chat list holds no `item_reference`

    fresh = pipeline._situation(inbound, "tenant", estimator, None, Attempt())
    assert (fresh.last_activity, fresh.mark, fresh.anchors, fresh.policy, fresh.keep_loop) == (
        None, None, (), None, False)


def test_a_responses_request_reads_its_tenants_item_sizes(tmp_path: Path) -> None:
    settings = parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}},
                               "state": {"path": str(tmp_path)}}, {})
    pipeline = Pipeline(settings)
    pipeline.item_sizes.record("tenant", [("fc_1", 321)])
    pipeline.item_sizes.record("other", [("fc_2", 5)])
    inbound = parse_inbound(Api.RESPONSES, orjson.dumps({"model": "gpt-4o", "input": "Hi."}))
    estimator = pipeline.estimators.estimator("gpt-4o")
    references = pipeline._situation(inbound, "tenant", estimator, None, Attempt()).references
    assert references.get("fc_1") == 321 and references.get("fc_2") is None
