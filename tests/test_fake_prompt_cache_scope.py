"""The fake's prompt cache is kept per credential, as a provider keeps it per organization or
subscription (Azure OpenAI: "Prompt caches aren't shared between Azure subscriptions"): a
prefix another key sent is not a cache hit, the same key's is, for chat and Responses."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import system, user
from proxy.testing.usage import PromptCache

LONG = system("You are a careful coding agent. " + " ".join(f"rule{i} applies." for i in range(700)))


async def cached(fake: FakeUpstream, path: str, payload: dict[str, Any], key: str) -> int:
    headers = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + path, json=payload, headers=headers) as response:
            assert response.status == 200, await response.text()
            usage = orjson.loads(await response.read())["usage"]
    details = usage.get("prompt_tokens_details") or usage["input_tokens_details"]
    return int(details["cached_tokens"])


async def test_a_chat_prefix_is_cached_for_its_own_key_only() -> None:
    first = {"model": "gpt-4o", "messages": [LONG, user("one")]}
    later = {"model": "gpt-4o", "messages": [LONG, user("one"), user("two")]}
    async with FakeUpstream() as fake:
        assert await cached(fake, "/chat/completions", first, "sk-a") == 0
        assert await cached(fake, "/chat/completions", later, "sk-b") == 0
        assert await cached(fake, "/chat/completions", later, "sk-a") >= 1024


async def test_a_responses_prefix_is_cached_for_its_own_key_only() -> None:
    first = {"model": "gpt-5", "instructions": LONG["content"], "input": "one"}
    async with FakeUpstream() as fake:
        assert await cached(fake, "/responses", first, "sk-a") == 0
        assert await cached(fake, "/responses", first, "sk-b") == 0
        assert await cached(fake, "/responses", first, "sk-a") >= 1024


def test_the_cache_lookup_is_scoped() -> None:
    cache = PromptCache()
    units = [(b"a", 1100), (b"b", 300)]
    assert cache.lookup("m", units, scope="one") == (0, 1280)
    assert cache.lookup("m", units, scope="two") == (0, 1280)
    assert cache.lookup("m", units, scope="one") == (1280, 0)
