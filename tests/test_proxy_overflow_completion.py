"""The proxy's overflow path (SPEC §9) when the completion a request reserves, or its function
definitions, push it over the window: the provider's texts of PROTOCOL.md §3, end to end."""

from __future__ import annotations

import functools
import itertools
from typing import Any

import httpx
import pytest

from proxy.testing.reference_tokens import REPLY_PRIMING, chat_message_tokens, chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.conftest import API_KEY

LIMIT = 16_000
TOOL = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the repository.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "Path of the file"}}}}}


def _rig(make_fake, make_proxy, style: str):
    fake = make_fake(limits={"small-*": LIMIT}, overflow_style=style,
                     window_counts_completion=True)
    FakeSummarizer.install(fake)
    # Without the cheap stages the request goes upstream as the client sent it.
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}},
                       compaction={"collapse": {"enabled": False}, "truncate": {"enabled": False}})
    return fake, proxy


@functools.cache
def _session_under(tokens: int) -> list[dict[str, Any]]:
    """The longest prefix of a coding session where the model speaks next that stays under
    `tokens`: under the proxy's trigger, so only upstream's refusal makes it compact."""
    session = coding_session(300, seed=3)
    sizes = list(itertools.accumulate(chat_message_tokens(m) for m in session))
    ends = [k for k in range(2, len(session)) if session[k]["role"] == "assistant"
            and sizes[k - 1] + REPLY_PRIMING < tokens]
    return session[:max(ends)]


def _post(proxy, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", json=body, timeout=60,
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "reserve"})


def _main(fake) -> list[Any]:
    return [r.json for r in fake.requests
            if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]


@pytest.mark.parametrize("style", ["openai", "anthropic", "vllm", "deepseek"])
def test_a_reserved_completion_over_the_window_is_compacted_and_retried(
        make_fake, make_proxy, style: str) -> None:
    fake, proxy = _rig(make_fake, make_proxy, style)
    messages = _session_under(11_000)
    reserve = 6_000  # with the messages, over the window; the proxy has no `context_window`
    fake.script(Reply.text("fits now"))
    answer = _post(proxy, {"model": "small-coder", "messages": messages, "max_tokens": reserve})
    assert answer.status_code == 200, answer.text
    assert answer.json()["choices"][0]["message"]["content"] == "fits now"
    first, second = _main(fake)
    assert proxy.requests()[-1]["retried"] == "context_overflow"
    assert second["max_tokens"] == reserve, "only the messages are the proxy's to change"
    assert chat_prompt_tokens(second) + reserve <= LIMIT < chat_prompt_tokens(first) + reserve


def test_functions_over_the_window_are_compacted_and_retried(make_fake, make_proxy) -> None:
    # The proxy counts tool definitions too, so only a window it overrates (its profile says
    # 32,000, the model takes 16,000) lets the request reach upstream whole.
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 32_000}},
                       compaction={"collapse": {"enabled": False}, "truncate": {"enabled": False}})
    messages = _session_under(11_000)
    tools = [{**TOOL, "function": {**TOOL["function"], "name": f"tool_{i}",
                                   "description": "Read a file of the repository. " * 30}}
             for i in range(30)]
    body = {"model": "small-coder", "messages": messages, "tools": tools}
    assert LIMIT < chat_prompt_tokens(body) < 20_000  # over the window, under the proxy's trigger
    fake.script(Reply.text("fits now"))
    answer = _post(proxy, body)
    assert answer.status_code == 200, answer.text
    first, second = _main(fake)
    assert proxy.requests()[-1]["retried"] == "context_overflow"
    assert first["tools"] == second["tools"] == tools
    assert chat_prompt_tokens(second) <= LIMIT


def test_a_completion_no_compaction_can_make_room_for_is_relayed_after_one_retry(
        make_fake, make_proxy) -> None:
    fake, proxy = _rig(make_fake, make_proxy, "openai")
    messages = _session_under(11_000)
    answer = _post(proxy, {"model": "small-coder", "messages": messages, "max_tokens": LIMIT})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert f"in the messages, {LIMIT} in the completion)" in error["message"]
    assert len(_main(fake)) == 2, "one compaction and one retry, no more"


def test_max_tokens_that_fill_the_window_get_the_upstreams_own_refusal(make_fake,
                                                                       make_proxy) -> None:
    """A new thread whose `max_tokens` is the profile's whole `context_window`: the upstream's
    refusal names `max_tokens`; the proxy's own would have called the input limit 1 token and
    asked for a new thread, which fails the same way."""
    fake = make_fake(limits={"small-*": 8_000}, overflow_style="vllm",
                     window_counts_completion=True)
    proxy = make_proxy(fake, models={"small-*": {"context_window": 8_000}})
    answer = _post(proxy, {"model": "small-1", "max_tokens": 8_000,
                           "messages": [{"role": "user", "content": "hi"}]})
    assert answer.status_code == 400
    assert "max_tokens" in answer.json()["error"]["message"]
    assert answer.json()["error"]["code"] != "context_compaction_insufficient"
    assert _main(fake) == [{"model": "small-1", "max_tokens": 8_000,
                            "messages": [{"role": "user", "content": "hi"}]}]
