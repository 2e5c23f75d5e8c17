"""Failure as a visible state (SPEC §9) and manual `/compact` (SPEC §8), end to end."""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson
import pytest

from proxy.compaction.manual import MARKER
from proxy.server import breakers
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL, planted_session, summary_of, task_then_loop
from tests.conftest import API_KEY

MODELS = {"small-*": {"max_input_tokens": LIMIT}}
# The cheap stages off: these tests steer the estimate around the trigger precisely.
NO_CHEAP = {"collapse": {"enabled": False}, "truncate": {"enabled": False},
            "microcompact": {"enabled": False}}


def _post(proxy, messages: list[dict[str, Any]], thread: str, **extra: Any) -> httpx.Response:
    body = orjson.dumps({"model": MODEL, "messages": messages, **extra})
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               "authorization": f"Bearer {API_KEY}"})


def _prefix(messages: list[dict[str, Any]], low: int, high: int) -> list[dict[str, Any]]:
    """A request-shaped prefix (ending before an assistant turn) sized within [low, high]."""
    for k in range(1, len(messages)):
        if messages[k]["role"] == "assistant" and low <= _tokens(messages[:k]) <= high:
            return messages[:k]
    raise AssertionError("no prefix of that size")


def _tokens(messages: list[dict[str, Any]]) -> int:
    from proxy.testing.reference_tokens import chat_prompt_tokens
    return chat_prompt_tokens({"messages": messages})


def _main_requests(fake) -> list[Any]:
    return [r for r in fake.requests if r.path.endswith("/chat/completions")
            and not is_summarizer_request(r.json)]


def test_breaker_opens_doubles_its_cooldown_and_closes_on_success(make_fake, make_proxy,
                                                                  monkeypatch) -> None:
    # The breakers' clock moves only when the test moves it: a loaded machine cannot let a
    # cooldown run out between two requests.
    now = [1_000.0]
    monkeypatch.setattr(breakers, "clock", lambda: now[0])
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 2, "base_cooldown_s": 0.4, "max_cooldown_s": 5}})
    messages, _ = planted_session(200)
    between = _prefix(messages, 12_600, 14_500)  # over the trigger, under the limit
    for attempt in range(2):
        fake.script(Reply.text("ok"))
        assert _post(proxy, between, "brk").status_code == 200  # degraded: still fits
    assert summarizer.calls == 2
    fake.script(Reply.text("ok"))
    assert _post(proxy, between, "brk").status_code == 200
    assert summarizer.calls == 2, "no summary while the breaker is open"
    failures = proxy.logs.events("compaction_failed")
    assert [f["stage"] for f in failures] == ["summarize", "summarize", "breaker_open"]
    assert all(f["degraded"] for f in failures)
    first_cooldown = failures[-1]["retry_after_s"]
    assert first_cooldown == 0.4
    now[0] += 0.45
    fake.script(Reply.text("ok"))
    _post(proxy, between, "brk")  # the half-open trial, failing
    assert summarizer.calls == 3
    fake.script(Reply.text("ok"))
    _post(proxy, between, "brk")
    reopened = proxy.logs.events("compaction_failed")[-1]
    assert reopened["stage"] == "breaker_open"
    assert reopened["retry_after_s"] == 0.8, "the cooldown doubled"
    summarizer.fail = 0
    now[0] += 0.85
    fake.script(Reply.text("ok"))
    answer = _post(proxy, between, "brk")
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    assert len(proxy.logs.events("compaction_completed")) == 1


def test_breaker_open_and_too_big_is_a_clear_503(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction={
        **NO_CHEAP, "breaker": {"failures": 1, "base_cooldown_s": 60}})
    messages, _ = planted_session(200)
    over = _prefix(messages, int(LIMIT * 1.05), LIMIT * 2)
    answer = _post(proxy, over, "big")
    assert answer.status_code == 503
    error = answer.json()["error"]
    assert error["code"] == "compaction_unavailable" and "new thread" in error["message"]
    again = _post(proxy, over, "big")
    assert again.status_code == 503 and int(again.headers["retry-after"]) >= 1
    assert not _main_requests(fake), "an over-long request was forwarded"


def test_upstream_overflow_buys_one_compaction_and_one_retry(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": 9_000})  # the model is smaller than its profile says
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    messages, _ = planted_session(200)
    request = _prefix(messages, 9_300, 11_300)  # over the model's real limit, under the trigger
    fake.script(Reply.text("after the retry"))
    answer = _post(proxy, request, "overflow")
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "after the retry"
    assert answer.headers["x-compaction"] == "compacted"
    assert summarizer.calls >= 1
    main = _main_requests(fake)
    assert len(main) == 2 and summary_of(main[1].body) is not None
    line = proxy.requests()[-1]
    assert line["retried"] == "context_overflow" and line["first_status"] == 400
    assert proxy.logs.events("compaction_started")[0]["forced"] is True
    # Each compaction event names the tenant as the request line does: two tenants may use
    # the same thread id.
    for name in ("compaction_started", "compaction_completed"):
        assert [e["tenant"] for e in proxy.logs.events(name)] == [line["tenant"]], name


def test_overflow_that_compaction_cannot_fix_reaches_the_client(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": 9_000})
    FakeSummarizer.install(fake, fail=100)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    messages, _ = planted_session(200)
    answer = _post(proxy, _prefix(messages, 9_300, 11_300), "overflow-fail")
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    assert len(_main_requests(fake)) == 1, "one attempt, no second forward"
    failed = proxy.logs.events("compaction_failed")  # the overflow's retry says why it failed
    assert [f["stage"] for f in failed] == ["summarize", "overflow_retry"]
    assert failed[-1]["cause"] == "summarize" and "summarizer" in failed[-1]["error"]
    assert proxy.requests()[-1]["compaction_failed"] == "overflow_retry"


def test_post_check_failure_is_a_400_asking_for_a_new_thread(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    messages, _ = planted_session(40)
    huge = {"role": "user", "content": "Please review this log:\n" + "error at line 42\n" * 3000}
    request = [*messages[:12], huge]
    answer = _post(proxy, request, "huge")
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_compaction_insufficient"
    assert "new thread" in error["message"]
    assert not _main_requests(fake)
    failed = proxy.logs.events("compaction_failed")
    assert failed and failed[-1]["stage"] in ("post_check", "hysteresis")
    assert {f["tenant"] for f in failed} == {proxy.requests()[-1]["tenant"]}


def test_latest_user_message_too_long_to_restore_is_a_400_not_a_cut(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    request = task_then_loop(task_lines=1100, steps=4)  # a task of about 11,000 tokens
    answer = _post(proxy, request, "long-task")
    assert answer.status_code == 400, "the latest user message was cut to fit"
    error = answer.json()["error"]
    assert error["code"] == "context_compaction_insufficient"
    assert "the latest one whole" in error["message"] and "new thread" in error["message"]
    trigger = int(LIMIT * 0.75)
    assert f"trigger: {trigger:,} tokens" in error["message"]
    assert f"limit: {LIMIT:,} tokens" in error["message"]
    assert not _main_requests(fake)
    failed = proxy.logs.events("compaction_failed")
    assert [f["stage"] for f in failed] == ["post_check"]
    assert proxy.requests()[-1]["compaction_failed"] == "post_check"


def test_nothing_left_to_compact_is_a_recorded_post_check_failure(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    task = {"role": "user", "content": "".join(f"requirement {i:04d}: keep this line\n"
                                               for i in range(1700))}  # over the model's limit
    answer = _post(proxy, [{"role": "system", "content": "You are a coding agent."}, task],
                   "one-big-task")
    assert answer.status_code == 400 and summarizer.calls == 0
    error = answer.json()["error"]
    assert error["code"] == "context_compaction_insufficient"
    assert "nothing more can be compacted" in error["message"]
    assert f"limit: {LIMIT:,} tokens" in error["message"] and "new thread" in error["message"]
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], f["degraded"]) for f in failed] == [("post_check", False)]
    assert proxy.requests()[-1]["compaction_failed"] == "post_check"
    metrics = httpx.get(f"{proxy.url}/metrics").text
    assert 'outcome="failed_post_check",strategy="partial"} 1.0' in metrics
    assert not _main_requests(fake)


@pytest.mark.parametrize("stream", [False, True])
def test_manual_compact_answers_itself_and_leaves_the_projection(make_fake, make_proxy,
                                                                 make_client, stream: bool) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    client = make_client(proxy.base_url)
    messages, facts = planted_session(40)
    history = messages[:20] if messages[20]["role"] == "assistant" else messages[:21]
    command = [*history, {"role": "user", "content": "/compact keep the FACT lines"}]
    before = len(_main_requests(fake))
    headers = {"x-thread-id": f"manual-{stream}"}
    if stream:
        chunks = list(client.chat.completions.create(model=MODEL, messages=command, stream=True,
                                                     extra_headers=headers))
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert chunks[-1].choices[0].finish_reason == "stop"
    else:
        answer = client.chat.completions.create(model=MODEL, messages=command,
                                                extra_headers=headers)
        text = answer.choices[0].message.content
        assert answer.choices[0].finish_reason == "stop" and answer.object == "chat.completion"
    assert text.startswith(MARKER) and "Compacted" in text
    assert len(_main_requests(fake)) == before, "no main-model call for /compact"
    assert summarizer.calls == 1
    assert "keep the FACT lines" in str(summarizer.requests[0])

    # Next turn: the command and its answer come back, but are not model context.
    follow = [*command, {"role": "assistant", "content": text},
              {"role": "user", "content": "Continue with the next step."}]
    fake.script(Reply.text("continuing"))
    client.chat.completions.create(model=MODEL, messages=follow, extra_headers=headers)
    sent = _main_requests(fake)[-1].json["messages"]
    assert not any("/compact" in str(m.get("content")) or MARKER in str(m.get("content"))
                   for m in sent)
    assert summary_of(_main_requests(fake)[-1].body) is not None

    # A second /compact with nothing new compacts nothing and says so.
    again = [*follow[:-1], {"role": "user", "content": "/compact"}]
    answer = client.chat.completions.create(model=MODEL, messages=again, extra_headers=headers)
    assert "Nothing new to compact" in answer.choices[0].message.content
    assert summarizer.calls == 1
