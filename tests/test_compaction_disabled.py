"""`compaction.enabled: false` (README's config reference): no summary of any kind, neither
automatic, nor `/compact`, nor the one an upstream overflow would buy; the cheap stages run."""

from __future__ import annotations

import httpx

from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY

PROFILE = {"small-*": {"max_input_tokens": 2000}}
HEADERS = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "off"}


def _long_chat(turns: int) -> list[dict]:
    messages: list[dict] = [{"role": "system", "content": "You are helpful."}]
    for n in range(turns):
        messages += [{"role": "user", "content": f"question {n}: " + "detail " * 120},
                     {"role": "assistant", "content": f"answer {n}: " + "fine " * 60}]
    return messages


def _post(proxy, messages: list[dict]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", headers=HEADERS, timeout=30,
                      json={"model": "small-1", "messages": messages})


def _summaries(fake) -> list:
    return [r for r in fake.requests if r.json and is_summarizer_request(r.json)]


def test_a_request_over_the_trigger_goes_up_without_a_summary(make_proxy, fake) -> None:
    proxy = make_proxy(fake, models=PROFILE, compaction={"enabled": False})
    messages = _long_chat(12) + [{"role": "user", "content": "go on"}]
    answer = _post(proxy, messages)
    assert answer.status_code == 200, answer.text
    assert int(answer.headers["x-context-tokens"]) > 2000  # over the window, and still sent
    assert answer.headers["x-compaction"] == "none"
    assert _summaries(fake) == [] and proxy.logs.events("compaction_started") == []
    assert fake.requests[-1].json["messages"] == messages


def test_an_upstream_overflow_is_relayed_without_a_forced_compaction(make_fake,
                                                                     make_proxy) -> None:
    fake = make_fake(limits={"small-*": 1000})
    proxy = make_proxy(fake, compaction={"enabled": False})  # no profile: the fallback trigger
    answer = _post(proxy, _long_chat(6) + [{"role": "user", "content": "go on"}])
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "context_length_exceeded"
    assert len(fake.requests) == 1, "one attempt: no retry, no summarizer call"
    assert proxy.logs.events("upstream_retry") == []
    assert proxy.logs.events("compaction_started") == []


def test_the_manual_command_is_an_ordinary_message_for_the_model(make_proxy, fake) -> None:
    proxy = make_proxy(fake, models=PROFILE, compaction={"enabled": False})
    messages = _long_chat(2) + [{"role": "user", "content": "/compact"}]
    answer = _post(proxy, messages)
    assert answer.status_code == 200, answer.text
    assert _summaries(fake) == [], "no summary"
    assert fake.requests[-1].json["messages"][-1] == {"role": "user", "content": "/compact"}
    [line] = proxy.requests()
    assert "manual_compact" not in line
