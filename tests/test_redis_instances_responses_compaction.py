"""A stateless Responses thread (Codex-style: the whole `input` each turn, `store: false`,
function calls and outputs, reasoning items with `encrypted_content`) whose turns alternate
between two instances on one Redis, through the compaction threshold.

What each instance sends upstream must be what one instance alone sends, byte for byte: the
other instance applies the checkpoint the first wrote, estimates from the anchors of the
answers the first relayed, and strips the chain-bound blobs the fake (like OpenAI) would refuse
in a changed history.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import openai
import pytest

from proxy.compaction.apply import SUMMARY_HEADER
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer
from tests.conftest import API_KEY
from tests.redis_responses import MODEL, MODELS, ROUTES, main_requests, rig  # noqa: F401
from tests.test_redis_instances import thread_state
from tests.test_responses_api import TOOLS, _reply, _steps

def codex_turns(base_urls: Sequence[str], fake: FakeUpstream, thread: str, turns: int,
                settled: Callable[[], None] = lambda: None, referenced: bool = False,
                turns_limit: int = 16_000) -> list[dict[str, Any]]:
    """`turns` Codex turns of a coding session, turn k at `base_urls[k % len]`, each answer's
    output items appended to the history as returned (`referenced`: stored upstream, and
    echoed as `item_reference`s); `settled` runs after each turn. The history, to go on with."""
    history: list[dict[str, Any]] = []
    done = 0
    for side, chunk in _steps(coding_session(110, seed=6, api="responses")):
        if side == "client":
            history.extend(chunk)
            continue
        if done == turns:
            break
        fake.script(_reply(chunk))
        with openai.OpenAI(base_url=base_urls[done % len(base_urls)], api_key=API_KEY,
                           max_retries=0, timeout=30) as client:
            kwargs = dict(model=MODEL, input=history, store=referenced, tools=TOOLS,
                          include=["reasoning.encrypted_content"], prompt_cache_key=thread)
            if done % 3 == 2:
                with client.responses.stream(**kwargs) as events:
                    response = events.get_final_response()
            else:
                response = client.responses.create(**kwargs)
        assert response.status == "completed"
        history.extend({"type": "item_reference", "id": item.id} if referenced
                       else item.model_dump(exclude_none=True) for item in response.output)
        done += 1
        settled()
    return history


def has_summary(body: dict[str, Any]) -> bool:
    return any(part.get("text", "").startswith(SUMMARY_HEADER)
               for item in body.get("input", []) if item.get("type") == "message"
               for part in item.get("content", []) if isinstance(part, dict))


@pytest.mark.parametrize("referenced", [False, True])
def test_a_thread_compacted_at_one_instance_goes_on_at_the_other_byte_for_byte(
        rig: Any, make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., Any],  # noqa: F811
        redis_url: str, redis_prefix: str, referenced: bool) -> None:
    turns = 40
    alone = make_fake(limits={"small-*": 16_000}, always_reason=True)
    FakeSummarizer.install(alone)
    single = make_proxy(alone, models=MODELS)
    codex_turns([single.base_url], alone, "xresp", turns, referenced=referenced)

    r = rig(always_reason=True)
    FakeSummarizer.install(r.fake)

    def anchored() -> None:  # the answer's anchor in Redis before the next turn is sent
        deadline = time.monotonic() + 10
        while not any(a.created_at > anchored.since for a in  # type: ignore[attr-defined]
                      thread_state(redis_url, redis_prefix, "xresp").anchors):
            assert time.monotonic() < deadline, "the anchor never reached Redis"
            time.sleep(0.02)
        anchored.since = time.time()  # type: ignore[attr-defined]

    anchored.since = time.time()  # type: ignore[attr-defined]
    codex_turns([r.a.base_url, r.b.base_url], r.fake, "xresp", turns, anchored, referenced)

    shared, one = main_requests(r.fake), main_requests(alone)
    assert len(shared) == len(one) == turns  # no retry: nothing the fake refused
    assert [x.body for x in shared] == [x.body for x in one]
    summarized = [k for k, x in enumerate(shared) if has_summary(x.json)]
    assert summarized and summarized == list(range(summarized[0], turns))
    lines = sorted(r.a.wait_for("request", turns // 2) + r.b.wait_for("request", turns // 2),
                   key=lambda line: line["timestamp"])
    assert [line["status"] for line in lines] == [200] * turns
    compacted = [k for k, line in enumerate(lines) if line["compaction"] == "compacted"]
    assert compacted and compacted[0] == summarized[0]
    # The turns right after each compaction are at the other instance: its checkpoint, applied.
    for k in compacted:
        assert lines[k + 1]["compaction"] == "applied" and lines[k + 1]["checkpoint"] >= 1
    # Every turn but the first and the compacted ones is estimated from the other's answer.
    # Estimated from the anchors of the answers the other instance relayed, as one instance
    # alone estimates from its own: the same turns anchored, the same estimates.
    alone = single.requests()
    assert [line.get("anchor_used") for line in lines] == [x.get("anchor_used") for x in alone]
    estimates = [line["tokens_estimate"] for line in lines]
    if referenced:
        # The sizes of the items each instance relayed are its own (README: not persisted):
        # a reference to an item the other relayed counts by its answer's anchor, which may
        # differ from the recorded size by the item's framing. The bodies above are the same.
        assert all(abs(a - b) <= 0.01 * b for a, b in
                   zip(estimates, [x["tokens_estimate"] for x in alone], strict=True))
    else:
        assert estimates == [x["tokens_estimate"] for x in alone]
    assert sum(bool(line.get("anchor_used")) for line in lines) > turns // 2
    assert not any(line.get("retried") for line in lines)
    assert not [x for x in shared if has_summary(x.json)
                and any(i.get("type") == "reasoning" and i.get("encrypted_content")
                        for i in x.json["input"][:_latest_user(x.json["input"])])]


def _latest_user(items: list[dict[str, Any]]) -> int:
    return max(k for k, item in enumerate(items) if item.get("role") == "user")
