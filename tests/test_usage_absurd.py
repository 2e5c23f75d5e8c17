"""Usage an upstream reports that no request could have cost (1e23 tokens, a negative count, a
fraction, a string): never an anchor, which would make the thread's next request look far over
its window (a 400 `context_compaction_insufficient`, or a needless compaction). The request
line says it was ignored; the answer reaches the client as sent."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from aiohttp import web

from proxy.usage import normalize, plausible_usage, usage_ceiling
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture

USER = [{"role": "user", "content": "Say hello."}]
SANE = {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13}
ABSURD = [{"prompt_tokens": 1e23, "completion_tokens": 2},
          {"prompt_tokens": 10**30, "completion_tokens": 2},
          {"prompt_tokens": 11, "completion_tokens": 1e23},
          {"prompt_tokens": 11, "completion_tokens": 2,
           "prompt_tokens_details": {"cached_tokens": 10**20}},
          {"input_tokens": 11, "output_tokens": 2, "cache_read_input_tokens": 9e18},
          {"prompt_tokens": 2**63, "completion_tokens": 2}]
UNREADABLE = [{"prompt_tokens": -5, "completion_tokens": 2},
              {"prompt_tokens": 11.5, "completion_tokens": 2},
              {"prompt_tokens": "11", "completion_tokens": 2},
              {"prompt_tokens": True, "completion_tokens": 2}]


def _answering(usages: list[Any]) -> Any:
    """An upstream that answers each request with the next of `usages`."""
    async def answer(request: web.Request) -> web.StreamResponse:
        usage = usages.pop(0) if usages else SANE
        return web.Response(content_type="application/json", text=json.dumps({
            "id": "c", "object": "chat.completion", "created": 1, "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "Hello"}}],
            "usage": usage}))
    return answer


def _turns(proxy: Any, count: int) -> list[httpx.Response]:
    messages: list[Any] = list(USER)
    answers = []
    for _ in range(count):
        answers.append(httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                                  headers={"Authorization": f"Bearer {API_KEY}",
                                           "x-thread-id": "t"},
                                  json={"model": "gpt-4o", "messages": messages}))
        messages += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "on"}]
    return answers


@pytest.mark.parametrize("usage", ABSURD + UNREADABLE)
def test_absurd_usage_anchors_nothing_and_the_next_turn_goes_on(make_upstream,  # noqa: F811
                                                                 make_proxy, usage: Any) -> None:
    proxy = make_proxy(make_upstream(_answering([usage])).url, tokens=COUNTED)
    first, second, third = _turns(proxy, 3)
    assert first.json()["usage"] == usage  # the client gets what the upstream said
    assert second.status_code == 200 and third.status_code == 200
    lines = proxy.requests()
    assert lines[1]["anchor_used"] is False and "usage_input" not in lines[0]
    assert lines[2]["anchor_used"] is True  # the sane usage of the second turn anchors
    if usage in ABSURD:
        assert lines[0]["usage_ignored"] == "implausible"
        [warning] = proxy.logs.events("usage_ignored")
        assert warning["thread"] and warning["reason"] == "implausible"
    else:
        assert lines[0]["usage_ignored"] == "unreadable"


def test_usage_within_the_bound_is_kept() -> None:
    usage = normalize({"prompt_tokens": 900_000, "completion_tokens": 100_000})
    assert usage is not None and plausible_usage(usage, 1_000_000)
    assert not plausible_usage(usage, 999_999)


def test_a_count_above_twice_the_profiles_window_anchors_nothing(make_upstream,  # noqa: F811
                                                                 make_proxy) -> None:
    # 5,000 tokens cannot be the cost of a request to a model of 1,000: with it as the anchor,
    # the next turn would be refused as too large for the model.
    proxy = make_proxy(make_upstream(_answering([{"prompt_tokens": 5_000,
                                                  "completion_tokens": 2}])).url,
                       models={"small-*": {"max_input_tokens": 1_000}}, tokens=COUNTED)
    messages: list[Any] = list(USER)
    for _ in range(2):
        answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                            headers={"Authorization": f"Bearer {API_KEY}", "x-thread-id": "s"},
                            json={"model": "small-1", "messages": messages})
        assert answer.status_code == 200
        messages += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "on"}]
    first, second = proxy.requests()
    assert first["usage_ignored"] == "implausible" and second["anchor_used"] is False


def test_the_ceiling_is_twice_the_window_or_the_largest_window_on_offer() -> None:
    assert usage_ceiling(128_000) == 256_000
    assert usage_ceiling(None) == 10_000_000
