"""Usage reported by the fake: reference prompt counts, reasoning, the simulated prompt cache, styles."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import system, user
from proxy.testing.prompt_units import PromptUnits, prompt_tokens
from proxy.testing.reference_tokens import (
    chat_message_tokens,
    chat_prompt_tokens,
    count_text,
    responses_prompt_tokens,
)
from proxy.testing.replies import Reply
from proxy.testing.usage import Counts, PromptCache, chat_usage, responses_usage

LONG = system("You are a careful coding agent. " + " ".join(f"rule{i} applies." for i in range(700)))


async def usage_of(fake: FakeUpstream, payload: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/chat/completions", json=payload) as response:
            assert response.status == 200, await response.text()
            return orjson.loads(await response.read())["usage"]  # type: ignore[no-any-return]


def chat(*messages: dict[str, Any], model: str = "gpt-4o") -> dict[str, Any]:
    return {"model": model, "messages": list(messages)}


async def test_prompt_tokens_are_the_reference_count_and_reasoning_is_counted() -> None:
    async with FakeUpstream() as fake:
        fake.script(Reply.text("four", reasoning="two plus two"))
        payload = chat(user("what is two plus two?"))
        usage = await usage_of(fake, payload)
    assert usage["prompt_tokens"] == chat_prompt_tokens(payload)
    reasoning = count_text("two plus two")
    assert usage["completion_tokens_details"]["reasoning_tokens"] == reasoning
    assert usage["completion_tokens"] == reasoning + count_text("four")


def blocks(tokens: int) -> int:
    return tokens - tokens % 128


@pytest.mark.parametrize("current", ["plain text input", [{"role": "user", "content": "hi"},
                                                          {"type": "function_call", "call_id": "c",
                                                           "name": "f", "arguments": "{}"},
                                                          {"type": "function_call_output",
                                                           "call_id": "c", "output": "done"}]])
def test_responses_prompt_units_add_up_to_the_reference_count(current: Any) -> None:
    body = {"model": "m", "instructions": "be brief", "input": current,
            "tools": [{"type": "function", "name": "f", "parameters": {}}]}
    units = PromptUnits()
    assert prompt_tokens(units.responses(body, [])) == responses_prompt_tokens(body)
    assert prompt_tokens(units.chat(chat(LONG, user("x")))) == chat_prompt_tokens(chat(LONG, user("x")))


async def test_shared_prefix_is_reported_as_cached_in_blocks_of_128() -> None:
    async with FakeUpstream() as fake:
        first = await usage_of(fake, chat(LONG, user("one")))
        second = await usage_of(fake, chat(LONG, user("one"), {"role": "assistant", "content": "ok"},
                                           user("two")))
        other_model = await usage_of(fake, chat(LONG, user("one"), model="gpt-4.1"))
        changed = await usage_of(fake, chat(LONG, user("uno")))
    shared = chat_message_tokens(LONG) + chat_message_tokens(user("one"))
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] == blocks(shared) >= 1024
    assert other_model["prompt_tokens_details"]["cached_tokens"] == 0
    assert changed["prompt_tokens_details"]["cached_tokens"] == blocks(chat_message_tokens(LONG))


async def test_short_prefixes_are_never_cached() -> None:
    async with FakeUpstream() as fake:
        await usage_of(fake, chat(user("short")))
        again = await usage_of(fake, chat(user("short"), {"role": "assistant", "content": "x"}, user("y")))
    assert again["prompt_tokens_details"]["cached_tokens"] == 0


def test_prompt_cache_counts_whole_units_only() -> None:
    cache = PromptCache()
    assert cache.lookup("m", [(b"a", 1000), (b"b", 300)]) == (0, 1280)
    assert cache.lookup("m", [(b"a", 1000), (b"b", 300), (b"c", 500)]) == (1280, 512)
    assert cache.lookup("m", [(b"a", 1000), (b"x", 300)]) == (0, 1280)  # 1000 < 1024
    assert cache.lookup("m", [(b"z", 10), (b"a", 1000), (b"b", 300)]) == (0, 1280)


COUNTS = Counts(prompt=2000, completion=50, reasoning=10, cached=1280, cache_write=640)


def test_openai_style() -> None:
    usage = chat_usage(COUNTS, "openai")
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == (2000, 50, 2050)
    assert usage["prompt_tokens_details"]["cached_tokens"] == 1280
    assert usage["completion_tokens_details"]["reasoning_tokens"] == 10


def test_anthropic_litellm_style_already_includes_cache_in_prompt_tokens() -> None:
    usage = chat_usage(COUNTS, "anthropic-litellm")
    assert usage["prompt_tokens"] == 2000
    assert usage["cache_read_input_tokens"] == 1280 and usage["cache_creation_input_tokens"] == 640
    assert usage["prompt_tokens_details"] == {"cached_tokens": 1280, "cache_creation_tokens": 640}


def test_anthropic_native_style_is_additive() -> None:
    usage = chat_usage(COUNTS, "anthropic-native")
    assert "prompt_tokens" not in usage
    parts = ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    assert sum(usage[k] for k in parts) == 2000
    assert usage["output_tokens"] == 50


def test_deepseek_style_hit_plus_miss_is_prompt() -> None:
    usage = chat_usage(COUNTS, "deepseek")
    assert usage["prompt_cache_hit_tokens"] + usage["prompt_cache_miss_tokens"] == usage["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == 1280


def test_openrouter_style_has_cost_and_cache_writes() -> None:
    usage = chat_usage(COUNTS, "openrouter")
    assert usage["cost"] > 0 and usage["prompt_tokens_details"]["cache_write_tokens"] == 640


@pytest.mark.parametrize("style", ["openai", "anthropic-litellm", "anthropic-native", "deepseek",
                                   "openrouter"])
async def test_styles_over_http(style: str) -> None:
    async with FakeUpstream(usage_style=style) as fake:
        await usage_of(fake, chat(LONG, user("one")))
        usage = await usage_of(fake, chat(LONG, user("one"), user("two")))
    read = {"openai": lambda u: u["prompt_tokens_details"]["cached_tokens"],
            "anthropic-litellm": lambda u: u["cache_read_input_tokens"],
            "anthropic-native": lambda u: u["cache_read_input_tokens"],
            "deepseek": lambda u: u["prompt_cache_hit_tokens"],
            "openrouter": lambda u: u["prompt_tokens_details"]["cached_tokens"]}[style]
    assert read(usage) >= 1024


async def test_openrouter_streams_always_end_with_usage() -> None:
    async with FakeUpstream(usage_style="openrouter") as fake, aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/chat/completions",
                                json={**chat(user("hi")), "stream": True}) as response:
            frames = [f for f in (await response.read()).decode().split("\n\n") if f.strip()]
    assert orjson.loads(frames[-2][6:])["usage"]["cost"] > 0


def test_responses_usage_has_the_spec_shape() -> None:
    # PROTOCOL §5.2 (spec example): cache reads and writes in input_tokens_details.
    assert responses_usage(Counts(2000, 11, 3, cached=1024, cache_write=896)) == {
        "input_tokens": 2000, "input_tokens_details": {"cached_tokens": 1024, "cache_write_tokens": 896},
        "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 3}, "total_tokens": 2011}
