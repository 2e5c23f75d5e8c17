"""LLM compaction end to end: a long agent session replayed through the proxy (issue 5)."""

from __future__ import annotations

import httpx
import orjson
import pytest

from proxy.store.base import StoreError
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import (LIMIT, MODEL, common_suffix, elements, planted_session,
                                      replay, summary_of, task_then_loop)
from tests.conftest import API_KEY

MODELS = {"small-*": {"max_input_tokens": LIMIT}}


@pytest.fixture
def small(make_fake, make_proxy):
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS)
    return fake, summarizer, proxy


def test_a_long_session_stays_under_the_limit_and_keeps_its_facts(small) -> None:
    fake, summarizer, proxy = small
    messages, facts = planted_session(420)
    turns = sum(1 for m in messages[1:] if m["role"] == "assistant")
    assert turns >= 150
    run = replay(proxy.base_url, fake, messages, "long-session")
    assert set(run.statuses) == {200}

    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert all(chat_prompt_tokens(r.json) <= LIMIT for r in main), "a request over the limit"

    started = proxy.logs.events("compaction_started")
    completed = proxy.logs.events("compaction_completed")
    assert len(completed) >= 3, "the session must re-compact several times"
    assert len(started) == len(completed)
    assert summarizer.calls == sum(e["summarizer_calls"] for e in started)
    trigger = int(LIMIT * 0.75)
    assert all(e["tokens_before"] > trigger for e in started), "compacted below the trigger"
    assert all(e["tokens_after"] <= trigger for e in completed)

    final = run.upstream[-1]
    summary = summary_of(final)
    assert summary is not None
    text = final.decode()
    sent = orjson.loads(run.sent[-1])["messages"]
    planted = [f for f in facts if any(f in str(m.get("content")) for m in sent)]
    assert len(planted) >= 5
    missing = [f for f in planted if f not in text]
    assert not missing, f"facts lost through re-compaction: {missing[:3]}"

    lines = proxy.requests()
    assert len(lines) == len(run.sent)
    for sent, received, line in zip(run.sent, run.upstream, lines):
        client, model = elements(sent), elements(received)
        # The protected window goes upstream as the client's bytes; the latest user message
        # too, or, when the summary covers it, verbatim in the restored user messages.
        assert line["protected"] >= 1
        window = model[len(model) - line["protected"]:]
        assert not any(_made_by_proxy(e) for e in window), "`protected` counts only the client's"
        assert common_suffix(client, model) >= len(window)
        last_user = max(i for i, e in enumerate(client) if orjson.loads(e)["role"] == "user")
        if client[last_user] not in model:
            words = orjson.loads(client[last_user])["content"]
            assert any(words in str(orjson.loads(e)["content"]) for e in model)


def _made_by_proxy(element: bytes) -> bool:
    content = orjson.loads(element).get("content")
    return isinstance(content, str) and (content.startswith("Restored after context compaction")
                                         or summary_of_text(content))


def summary_of_text(content: str) -> bool:
    from proxy.compaction.apply import SUMMARY_HEADER
    return content.startswith(SUMMARY_HEADER)


def test_rebuilding_the_projection_does_not_summarize_again(small) -> None:
    fake, summarizer, proxy = small
    messages, _ = planted_session(200)
    replay(proxy.base_url, fake, messages, "steady")
    calls = summarizer.calls
    assert calls >= 1
    events = len(proxy.logs.events("compaction_completed"))
    # The same last request again, twice: the checkpoint is applied, nothing is summarized.
    last = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
    replay(proxy.base_url, fake, messages, "steady", start=last)
    replay(proxy.base_url, fake, messages, "steady", start=last)
    assert summarizer.calls == calls
    assert len(proxy.logs.events("compaction_completed")) == events
    lines = proxy.requests()[-2:]
    assert all(line["compaction"] == "applied" and line["checkpoint"] >= 1 for line in lines)
    assert fake.requests[-1].body == fake.requests[-3].body, "the rebuilt projection is byte-stable"


def test_an_edited_summarized_message_gets_no_stale_summary(small) -> None:
    fake, summarizer, proxy = small
    messages, _ = planted_session(200)
    replay(proxy.base_url, fake, messages, "edited")
    assert proxy.logs.events("compaction_completed")
    edited = list(messages)
    first_user = next(i for i, m in enumerate(edited) if m["role"] == "user")
    edited[first_user] = {**edited[first_user], "content": "A different first task entirely."}
    before = summarizer.calls
    last = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
    replay(proxy.base_url, fake, edited, "edited", start=last)
    received = fake.requests[-1].body
    assert b"A different first task entirely." in received or summarizer.calls > before
    if summarizer.calls == before:
        assert summary_of(received) is None, "the stale summary was applied to an edited prefix"


def test_a_rewind_to_the_cutoff_sends_the_clients_latest_message(small) -> None:
    fake, summarizer, proxy = small
    messages, _ = planted_session(200)
    replay(proxy.base_url, fake, messages, "rewind",
           stop=lambda k: bool(proxy.logs.events("compaction_completed")))
    cut = proxy.logs.events("compaction_completed")[0]["cutoff_index"]
    # The client goes back to the turn whose answer is the first message the checkpoint kept.
    fake.script(Reply.text("again"))
    body = orjson.dumps({"model": MODEL, "messages": messages[:cut]})
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                        headers={"content-type": "application/json", "x-thread-id": "rewind",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 200, answer.text
    received = [r for r in fake.requests if not is_summarizer_request(r.json)][-1].body
    assert elements(received)[-1] == elements(body)[-1], "the client's latest message is missing"
    assert proxy.requests()[-1].get("checkpoint") != 1, \
        "the checkpoint was applied to a list that ends at its cut"


def test_the_latest_user_message_comes_back_whole_after_compaction(small) -> None:
    fake, summarizer, proxy = small
    messages = task_then_loop(task_lines=450, steps=8)  # a task of about 4,500 tokens
    fake.script(Reply.text("next"))
    body = orjson.dumps({"model": MODEL, "messages": messages})
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                        headers={"content-type": "application/json", "x-thread-id": "task",
                                 "authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted"
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    received = orjson.loads(main[-1].body)
    task = messages[1]["content"]
    assert task not in [m.get("content") for m in received["messages"]], "it was summarized"
    assert any(task in str(m.get("content")) for m in received["messages"]), \
        "the latest user message was cut"


def test_two_tenants_with_one_thread_id_share_no_summary(small) -> None:
    fake, summarizer, proxy = small
    messages, facts = planted_session(200)
    replay(proxy.base_url, fake, messages, "same-id", key="sk-tenant-a-1234567")
    assert proxy.logs.events("compaction_completed")
    other, _ = planted_session(60, seed=99, tag="other-tenant")
    run = replay(proxy.base_url, fake, other, "same-id", key="sk-tenant-b-7654321")
    assert summary_of(run.upstream[0]) is None
    for body in run.upstream:
        assert not any(f.encode() in body for f in facts), "tenant A's facts reached tenant B"


def test_eight_concurrent_requests_on_one_thread_cause_one_summary(small) -> None:
    import concurrent.futures

    import httpx
    fake, summarizer, proxy = small
    messages, _ = planted_session(160)
    last = max(k for k, m in enumerate(messages) if m["role"] == "assistant")
    body = orjson.dumps({"model": MODEL, "messages": messages[:last]})

    def send(_: int) -> int:
        return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                          headers={"content-type": "application/json",
                                   "x-thread-id": "crowd"}).status_code
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        statuses = list(pool.map(send, range(8)))
    assert statuses == [200] * 8
    assert len(proxy.logs.events("compaction_completed")) == 1
    assert sum(1 for line in proxy.requests() if line.get("compaction_reused")) == 7


def test_a_failed_offload_does_not_stop_the_summary(make_fake, make_proxy, tmp_path) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    state = tmp_path / "offload-state"
    proxy = make_proxy(fake, models=MODELS, state_path=str(state))
    (state / "history").rmdir()  # lost while the proxy runs: every history append fails
    (state / "history").write_text("not a directory")
    messages, _ = planted_session(120)
    run = replay(proxy.base_url, fake, messages, "no-history")
    assert set(run.statuses) == {200}
    completed = proxy.logs.events("compaction_completed")
    assert completed and completed[0]["history_file"] is None
    assert "NotADirectoryError" in completed[0]["offload_error"]
    failed = [e for e in proxy.logs.events("compaction_failed") if e["stage"] == "offload"]
    # Not degraded: the request went up with its summary, only its history is missing.
    assert failed and failed[0]["degraded"] is False
    assert not any(line.get("compaction_degraded") for line in proxy.requests())
    assert summary_of(run.upstream[-1]) is not None


def test_a_history_directory_that_cannot_take_files_stops_the_start(make_fake, make_proxy,
                                                                     tmp_path) -> None:
    state = tmp_path / "unwritable-history"
    state.mkdir()
    (state / "history").write_text("not a directory")
    with pytest.raises(StoreError, match="history directory .* cannot take files"):
        make_proxy(make_fake(), state_path=str(state))
