"""One retry after an upstream rejection (SPEC §7.4, §9), before any byte reached the client."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from proxy.testing.signing import DEFAULT_SIGNER
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY

CALL = {"id": "call_abc", "type": "function", "function": {"name": "read_file",
                                                           "arguments": '{"path":"a.py"}'}}


def _chat(proxy, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "retry"},
                      json={"model": "gpt-4o", "messages": messages, **extra})


def _main(fake, path: str = "/chat/completions") -> list[Any]:
    return [r for r in fake.requests if r.path.endswith(path) and not is_summarizer_request(r.json)]


def forged_exchange() -> list[dict[str, Any]]:
    """A Responses exchange whose reasoning item carries a blob another organization made (the
    upstream refuses it): the user's, the reasoning, the assistant's; fresh dicts each call."""
    return [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
            {"type": "reasoning", "id": "rs_0123", "summary": [],
             "encrypted_content": "gAAAAforged-by-another-org"},
            {"type": "message", "role": "assistant",
             "content": [{"type": "output_text", "text": "hello", "annotations": []}]}]


def test_rejected_encrypted_reasoning_is_stripped_and_retried(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    fake.script(Reply.text("recovered"))
    items = [*forged_exchange(),
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go on"}]}]
    answer = httpx.post(f"{proxy.base_url}/responses", timeout=30, json={
        "model": "gpt-4o", "input": items, "store": False,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "enc"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["output"][-1]["content"][0]["text"] == "recovered"
    sent = _main(fake, "/responses")
    assert len(sent) == 2
    assert any(i.get("type") == "reasoning" for i in sent[0].json["input"])
    assert not any(i.get("type") == "reasoning" for i in sent[1].json["input"])
    line = proxy.requests()[-1]
    assert line["retried"] == "encrypted reasoning rejected" and line["first_status"] == 400
    # Each call's wait apart: the refused one's is not lost under the retry's.
    assert isinstance(line["first_upstream_ms"], float) and isinstance(line["upstream_ms"], float)
    assert line["first_upstream_ms"] + line["upstream_ms"] <= line["duration_ms"]
    assert proxy.logs.events("upstream_retry")


def test_unsupported_reasoning_content_is_dropped_and_retried(make_fake, make_proxy) -> None:
    fake = make_fake(dialect="cerebras")
    proxy = make_proxy(fake)
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "reasoning_content": "I should read it.",
                 "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    first, second = _main(fake)
    assert "reasoning_content" in first.json["messages"][1]
    assert "reasoning_content" not in second.json["messages"][1]
    assert second.json["messages"][1]["tool_calls"] == [CALL], "tool calls are never touched"


LITELLM_FIELDS = {"reasoning_content": "I should read it.",
                  "thinking_blocks": [{"type": "thinking", "thinking": "t", "signature": "s"}],
                  "reasoning_items": [{"type": "reasoning", "id": "rs_1", "summary": []}],
                  "provider_specific_fields": {"refusal": None}}


@pytest.mark.parametrize(("dialect", "fields"), [
    ("openai-strict", LITELLM_FIELDS),  # PROTOCOL §4.7: a LiteLLM client sends them together
    ("openai-strict", {"reasoning": "I should read it."}),  # §4.8: vLLM's name
    ("cerebras", {"reasoning_details": [{"type": "reasoning.text", "text": "t", "index": 0}]}),
])
def test_private_fields_a_strict_upstream_rejects_are_all_dropped_and_retried(
        make_fake, make_proxy, dialect: str, fields: dict[str, Any]) -> None:
    fake = make_fake(dialect=dialect)
    proxy = make_proxy(fake)
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, **fields, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    first, second = _main(fake)
    assert set(fields) <= set(first.json["messages"][1])
    assert second.json["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [CALL]}
    assert proxy.requests()[-1]["retried"] == "reasoning fields not accepted"


def test_a_forged_gemini_signature_gets_the_documented_stand_in(make_fake, make_proxy) -> None:
    fake = make_fake(dialect="gemini")
    proxy = make_proxy(fake)
    call = {**CALL, "extra_content": {"google": {"thought_signature": "forged"}}}
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    retried = _main(fake)[-1].json["messages"][1]["tool_calls"][0]
    assert retried["extra_content"]["google"]["thought_signature"] == \
        "skip_thought_signature_validator"


def test_a_missing_gemini_signature_gets_the_documented_stand_in(make_fake, make_proxy) -> None:
    # The client kept no signature: stand-ins replace none, one goes where Gemini demands one.
    fake = make_fake(dialect="gemini")
    proxy = make_proxy(fake)
    second = {**CALL, "id": "call_def"}
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "tool_calls": [CALL, second]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"},
                {"role": "tool", "tool_call_id": "call_def", "content": "print(2)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    first, retried = _main(fake)[-2:]
    assert first.json["messages"] == messages
    calls = retried.json["messages"][1]["tool_calls"]
    assert calls[0]["extra_content"]["google"]["thought_signature"] == \
        "skip_thought_signature_validator"
    assert calls[1] == second


def test_missing_reasoning_content_gets_a_placeholder(make_fake, make_proxy) -> None:
    fake = make_fake(dialect="deepseek-thinking")
    proxy = make_proxy(fake)
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "tool_calls": [CALL]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    assert _main(fake)[-1].json["messages"][1]["reasoning_content"] == ""
    # Not the body the client sent: the header says so (it said `none` before).
    assert answer.headers["x-compaction"] == "applied"
    again = _chat(proxy, messages)  # the lesson's request: the fix at once
    assert len(_main(fake)) == 3 and again.headers["x-compaction"] == "applied"


def test_items_whose_reasoning_item_the_client_dropped_are_retried_without_it(
        make_fake, make_proxy) -> None:
    """A client that kept a response's web search and message but not its reasoning item:
    OpenAI refuses the ids that name it. The retry takes the message's id and the search (it
    cannot go without its id); the thread's next turn goes up so at once (a retry lesson)."""
    fake = make_fake()
    proxy = make_proxy(fake)
    nonce = "0123456789abcdef01234567"
    search = {"type": "web_search_call", "status": "completed",
              "id": DEFAULT_SIGNER.item_id("ws", nonce, 0, reasoned=True),
              "action": {"type": "search", "query": "aiohttp release"}}
    found = {"type": "message", "role": "assistant",
             "id": DEFAULT_SIGNER.item_id("msg", nonce, 1, reasoned=True),
             "content": [{"type": "output_text", "text": "3.12", "annotations": []}]}
    items = [{"type": "message", "role": "user", "content": "Look it up."}, search, found,
             {"type": "message", "role": "user", "content": "Thanks."}]

    def post() -> httpx.Response:
        return httpx.post(f"{proxy.base_url}/responses", timeout=30,
                          headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "kept"},
                          json={"model": "gpt-4o", "input": items, "store": True})

    answer = post()
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "applied"
    first, retried = _main(fake, "/responses")
    assert first.json["input"] == items
    assert retried.json["input"] == [items[0], {k: v for k, v in found.items() if k != "id"},
                                     items[3]]
    assert proxy.requests()[-1]["retried"] == "item id refers to a dropped reasoning item"
    assert post().status_code == 200
    assert _main(fake, "/responses")[2].body == retried.body
    assert proxy.requests()[-1]["retry_lesson"] == "item id refers to a dropped reasoning item"


def test_a_retry_refused_for_another_item_teaches_the_fix_naming_both(
        make_fake, make_proxy) -> None:
    """A store-on client echoes reasoning by reference and left out two references, a kept one
    between them. A refusal names one item: the retry fixes the first and is refused for the
    second, which is relayed (one retry a request). The thread's next request goes up with
    the fix naming both, and passes (on the old code every request was refused twice)."""
    fake = make_fake()
    proxy = make_proxy(fake)
    nonces = [f"{n:024x}" for n in range(1, 5)]
    fake.items.remember(f"Bearer {API_KEY}", [
        {"type": "reasoning", "id": DEFAULT_SIGNER.reasoning_id(n), "summary": []}
        for n in nonces[::2]])  # the kept references' items, stored upstream

    def step(k: int, referenced: bool) -> list[dict[str, Any]]:
        ref = ([{"type": "item_reference", "id": DEFAULT_SIGNER.reasoning_id(nonces[k])}]
               if referenced else [])
        return ref + [{"type": "function_call", "call_id": f"call_{k}", "name": "read_file",
                       "arguments": "{}",
                       "id": DEFAULT_SIGNER.item_id("fc", nonces[k], 0, reasoned=True)},
                      {"type": "function_call_output", "call_id": f"call_{k}", "output": "ok"}]

    items = [{"type": "message", "role": "user", "content": "Fix it."}]
    for k in range(4):
        items += step(k, referenced=k % 2 == 0)

    def post() -> httpx.Response:
        return httpx.post(f"{proxy.base_url}/responses", timeout=30,
                          headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "refs"},
                          json={"model": "gpt-4o", "input": items, "store": True})

    refused = post()
    second = items[9]["id"]
    assert refused.status_code == 400 and second in refused.json()["error"]["message"]
    first, retried = _main(fake, "/responses")
    assert [i.get("id") for i in retried.json["input"]] == [
        None, items[1]["id"], items[2]["id"], None, None, None,
        items[6]["id"], items[7]["id"], None, second, None]
    assert proxy.requests()[-1]["retry_lesson_carried_on"] == 2
    answer = post()
    assert answer.status_code == 200, answer.text
    lesson = _main(fake, "/responses")[2]
    assert len(_main(fake, "/responses")) == 3  # at once: no refused round trip
    assert [i.get("id") for i in lesson.json["input"]] == [
        None, items[1]["id"], items[2]["id"], None, None, None,
        items[6]["id"], items[7]["id"], None, None, None]
    assert proxy.requests()[-1]["retry_lesson"] == "item id refers to a dropped reasoning item"


def test_an_error_a_retry_cannot_fix_is_relayed_once(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    bad = [{"role": "user", "content": "x"},
           {"role": "assistant", "content": None, "tool_calls": [
               {**CALL, "function": {"name": "f", "arguments": {"not": "a string"}}}]},
           {"role": "tool", "tool_call_id": "call_abc", "content": "r"}]
    answer = _chat(proxy, bad)
    assert answer.status_code == 400 and answer.json()["error"]["code"] == "invalid_type"
    assert len(_main(fake)) == 1
    assert "retried" not in proxy.requests()[-1]


def test_overflow_inside_a_responses_stream_is_retried_before_relaying(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": 9_000}, responses_stream_overflow="event")
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 16_000}},
                       compaction={"collapse": {"enabled": False}, "truncate": {"enabled": False}})
    items = coding_session(60, seed=8, api="responses")
    from proxy.testing.reference_tokens import responses_prompt_tokens
    cut = next(k for k in range(2, len(items))
               if responses_prompt_tokens({"input": items[:k]}) > 9_500
               and items[k - 1].get("type") != "function_call")
    with httpx.stream("POST", f"{proxy.base_url}/responses", timeout=60, json={
            "model": "small-codex", "input": items[:cut], "stream": True,
            "prompt_cache_key": "stream-overflow"}) as answer:
        frames = answer.read()
    assert answer.status_code == 200
    assert b"response.completed" in frames and b"context_length_exceeded" not in frames
    assert proxy.requests()[-1]["retried"] == "context_overflow"
    assert len(_main(fake, "/responses")) == 2
    events = [orjson.loads(line[6:]) for line in frames.split(b"\n") if line.startswith(b"data: ")]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def test_thinking_stripped_by_compaction_is_restored_for_anthropic_via_openrouter(
        make_fake, make_proxy) -> None:
    # Compaction strips chain-bound blobs from the current loop (SPEC §7.2); Claude with
    # thinking wants them back (PROTOCOL §4.5), so the one retry sends the loop as the client did.
    fake = make_fake(dialect="openrouter", limits={"small-*": 24_000})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 24_000}},
                       compaction={"collapse": {"enabled": False}, "truncate": {"enabled": False}})
    session = coding_session(60, seed=7)
    cut = min(k for k, m in enumerate(session)  # past the trigger (18,000), under the window
              if m["role"] == "user" and chat_prompt_tokens({"messages": session[:k]}) > 18_000)
    detail = DEFAULT_SIGNER.sign_detail({"type": "reasoning.text", "text": "Run them first.",
                                         "format": "anthropic-claude-v1", "index": 0})
    loop = [{"role": "user", "content": "Run the tests now."},
            {"role": "assistant", "content": None, "reasoning": "Run them first.",
             "reasoning_details": [detail], "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_abc", "content": "4 passed"}]
    fake.script(Reply.text("All green."))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=60,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "thinking"},
                        json={"model": "small-coder", "messages": session[:cut] + loop})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "All green."
    assert summarizer.calls >= 1
    first, second = _main(fake)
    assert "reasoning_details" not in first.json["messages"][-2]
    assert second.json["messages"][-3:] == loop
    line = proxy.requests()[-1]
    assert line["retried"] == "Anthropic requires the loop's thinking blocks"
    assert line["first_status"] == 400


def test_a_gemini_signature_a_strict_upstream_rejects_is_dropped_and_retried(
        make_fake, make_proxy) -> None:
    # A thread begun on Gemini's OpenAI-compatible endpoint, routed on to an OpenAI-style
    # server that checks keys: the signature its calls carry is refused as an unexpected key.
    fake = make_fake(dialect="openai-strict")
    proxy = make_proxy(fake)
    signed = {**CALL, "extra_content": {"google": {"thought_signature": "c2lnbmVk"}}}
    messages = [{"role": "user", "content": "read a.py"},
                {"role": "assistant", "content": None, "tool_calls": [signed]},
                {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]
    answer = _chat(proxy, messages)
    assert answer.status_code == 200, answer.text
    first, second = _main(fake)
    assert first.json["messages"][1]["tool_calls"] == [signed]
    assert second.json["messages"][1] == {"role": "assistant", "content": None, "tool_calls": [CALL]}
    assert proxy.requests()[-1]["retried"] == "reasoning fields not accepted"
