"""A long user message that is no longer the user's latest does not sink a compaction.

The latest summarized user message comes back whole (SPEC §5). When a newer user message is
kept raw, that one is an earlier instruction (a demonstration an agent pastes before the task,
say): kept whole while it fits, but when it alone is what breaks the post-check it is held to
the user-message budget like the others, and the summary covers it. Found replaying recorded
SWE-agent conversations at an 8k window: the first request (system, a demonstration of 8,258
tokens, the task) got a 400 asking for a new thread, though the task fitted easily.
"""

from __future__ import annotations

import httpx
import orjson

from proxy.compaction import postcheck
from proxy.compaction.apply import finish
from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api, content_text
from proxy.settings import RestoreSettings
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL
from tests.conftest import API_KEY
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, estimate,
                                           ids_of, measure, system, tool_result, user)

DEMONSTRATION = "".join(f"demonstration step {i:04d}: run the tests again\n" for i in range(900))
TASK = "Fix the parser: it drops the last token of a quoted string."


def finished(elements: list, cut: int, trigger: int):
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=cut, lead=1, start=1, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(user_messages_tokens=200), count)
    return finish(entries, ids_of(entries), cutoff, "S", restored, estimate=estimate,
                  measure=measure, trigger=trigger, limit=trigger * 4 // 3,
                  tokens_before=estimate(entries), strategy=PARTIAL, created_at=0.0,
                  model="m", summarizer_model="m")


def test_an_older_user_message_too_long_to_restore_is_left_to_the_summary() -> None:
    done = finished([system(), user(DEMONSTRATION), user(TASK)], cut=2, trigger=3000)
    assert done.verdict.ok, done.verdict
    texts = [content_text(e) for e in done.projection]
    assert texts[-1] == TASK, "the user's latest message is kept raw"
    assert not any("demonstration step 0899" in t for t in texts)
    assert done.event.restore_messages == ()


def test_an_older_user_message_that_fits_still_comes_back_whole() -> None:
    older = "Always run the linter before you commit.\n" * 40  # over the 200-token budget
    elements = [system(), user(older), assistant("a" * 20_000), user(TASK)]
    done = finished(elements, cut=3, trigger=20_000)
    assert done.verdict.ok, done.verdict
    quoted = [content_text(e) for e in done.projection[2:-1]]
    assert len(quoted) == 1 and older in quoted[0]


def test_the_current_request_too_long_to_restore_still_fails_the_post_check() -> None:
    # No user message after it: it is the request under way, never left to the summary.
    elements = [system(), user(DEMONSTRATION), assistant_calls(("c1", "run", {"cmd": "make"})),
                tool_result("c1", "ok"), assistant("done"),
                assistant_calls(("c2", "run", {"cmd": "make test"})), tool_result("c2", "ok")]
    done = finished(elements, cut=5, trigger=3000)
    assert not done.verdict.ok and done.verdict.stage == postcheck.RESTORE
    assert "the latest one whole" in done.verdict.reason


def test_a_demonstration_before_the_task_is_compacted_not_refused(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    big = DEMONSTRATION * 2  # about 21,000 tokens: over the model's limit by itself
    messages = [{"role": "system", "content": "You are a coding agent."},
                {"role": "user", "content": big}, {"role": "user", "content": TASK}]
    body = orjson.dumps({"model": MODEL, "messages": messages})
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                        headers={"content-type": "application/json", "x-thread-id": "demo",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 200, answer.text
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    received = orjson.loads(main[-1].body)["messages"]
    assert received[0] == messages[0] and received[-1] == messages[-1]
    assert not any(big in str(m.get("content")) for m in received)
