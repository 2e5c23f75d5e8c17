"""A Codex CLI session on the Responses API through compaction (`codex_shapes`): `store: false`
with encrypted reasoning, shell calls, freeform apply_patch calls, older local shell calls, a
patch the user interrupts, and the thread named by `session_id` or by `prompt_cache_key`."""

from __future__ import annotations

import orjson
import pytest

from proxy.core.repair import CANCELLED_TEXT
from proxy.testing.summarizer import FakeSummarizer
from tests.codex_shapes import codex_anomalies, codex_session

LIMIT = 16_000
TURNS = 48


@pytest.mark.parametrize("session_header", [True, False], ids=["session_id", "prompt_cache_key"])
def test_a_codex_session_compacts_and_every_request_is_one_the_api_accepts(
        make_fake, make_proxy, session_header: bool) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    run = codex_session(proxy.base_url, fake, "019a-codex-thread", TURNS, session_header)

    assert run.statuses == [200] * TURNS, run.errors
    assert len(proxy.logs.events("compaction_completed")) >= 5
    for sent, received in zip(run.sent, run.upstream, strict=True):
        assert codex_anomalies(sent, received) == []
    lines = proxy.requests()
    assert {line["thread_source"] for line in lines} == {
        "header:session_id" if session_header else "body:prompt_cache_key"}
    assert not [line for line in lines if line.get("retried")]
    assert sum(1 for line in lines if line["anchor_used"]) > TURNS // 2


def test_an_interrupted_patch_is_answered_as_cancelled_in_its_own_shape(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})

    run = codex_session(proxy.base_url, fake, "interrupted", TURNS)

    made = [item for sent, received in zip(run.sent, run.upstream, strict=True)
            for item in orjson.loads(received)["input"] if item not in orjson.loads(sent)["input"]
            and item.get("type", "").endswith("_output")]
    assert made, "an interrupted patch was sent upstream after a compaction"
    assert {item["type"] for item in made} == {"custom_tool_call_output"}
    assert all(CANCELLED_TEXT in item["output"] for item in made)
