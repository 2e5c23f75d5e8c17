"""`server.recent_cache_mb` is one budget for the last requests of all threads together (the
README's config reference): a thread's next request is parsed as a delta of its last one only
while that last one is still held."""

from __future__ import annotations

import httpx

from tests.conftest import API_KEY

# About 0.6 MiB of message text a thread: one fits a 1 MiB cache, two do not.
BIG = "x" * 600_000


def _turn(proxy, thread: str, follow_up: bool) -> dict:
    messages = [{"role": "user", "content": f"{thread}: {BIG}"}]
    if follow_up:
        messages += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": thread},
                        json={"model": "gpt-4o", "messages": messages})
    assert answer.status_code == 200, answer.text
    return proxy.requests()[-1]


def test_one_thread_within_the_budget_is_parsed_as_a_delta(make_proxy, fake) -> None:
    proxy = make_proxy(fake, server={"recent_cache_mb": 1})
    _turn(proxy, "a", follow_up=False)
    assert _turn(proxy, "a", follow_up=True)["elements_reused"] == 1


def test_the_budget_is_shared_another_threads_request_pushes_the_first_out(make_proxy,
                                                                           fake) -> None:
    proxy = make_proxy(fake, server={"recent_cache_mb": 1})
    _turn(proxy, "a", follow_up=False)
    _turn(proxy, "b", follow_up=False)  # the two together are over 1 MiB: "a" goes
    assert "elements_reused" not in _turn(proxy, "a", follow_up=True)
    # A budget for both: each thread's next request reuses its last one.
    proxy = make_proxy(fake, server={"recent_cache_mb": 2})
    _turn(proxy, "a", follow_up=False)
    _turn(proxy, "b", follow_up=False)
    assert _turn(proxy, "a", follow_up=True)["elements_reused"] == 1
