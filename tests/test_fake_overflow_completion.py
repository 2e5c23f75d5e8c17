"""The fake's overflow answers that count what the request reserves besides its messages: the
completion (`max_tokens` / `max_completion_tokens`) and OpenAI's function definitions
(PROTOCOL.md §3), each in its provider's words, and recognized by the proxy's detector."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from proxy.compaction.overflow import is_context_overflow
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import user
from proxy.testing.overflow import Size, chat_overflow, exceeds, requested_completion
from proxy.testing.reference_tokens import chat_prompt_tokens, tools_tokens

TOOL = {"type": "function", "function": {
    "name": "read_file", "description": "Read a file of the repository.",
    "parameters": {"type": "object", "properties": {
        "path": {"type": "string", "description": "Path of the file"}}}}}


def _message(style: str, size: Size, limit: int) -> str:
    body = chat_overflow(style, size, limit).body
    return body["error"]["message"] if "error" in body else body["message"]


def test_openai_names_the_completion_it_was_asked_for() -> None:
    assert chat_overflow("openai", Size(4012, completion=256), 4097).body == {"error": {
        "message": "This model's maximum context length is 4097 tokens. However, you requested "
                   "4268 tokens (4012 in the messages, 256 in the completion). Please reduce the "
                   "length of the messages or completion.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


def test_openai_names_the_functions_share_of_the_prompt() -> None:
    assert _message("openai", Size(8265, functions=392), 8192) == (
        "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "8265 tokens (7873 in the messages, 392 in the functions). Please reduce the length of "
        "the messages or functions.")


def test_other_providers_completion_texts() -> None:
    assert _message("anthropic", Size(199759, completion=8192), 200000) == (
        "input length and `max_tokens` exceed context limit: 199759 + 8192 > 200000, decrease "
        "input length or `max_tokens` and try again")
    assert _message("vllm", Size(2778, completion=8000), 4096) == (
        "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context "
        "length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778).")
    assert _message("deepseek", Size(60000, completion=8000), 65536) == (
        "This model's maximum context length is 65536 tokens. However, you requested 68000 tokens "
        "(60000 in the messages, 8000 in the completion). Please reduce the length of the "
        "messages or completion.")


def test_a_prompt_over_the_window_alone_keeps_the_prompt_form_where_checked_first() -> None:
    assert _message("vllm", Size(5000, completion=10), 4096).endswith(
        "your request has 5000 input tokens. Please reduce the length of the input messages.")
    assert _message("anthropic", Size(5000, completion=10), 4096) == (
        "prompt is too long: 5000 tokens > 4096 maximum")
    assert "(5000 in the messages, 10 in the completion)" in _message(
        "openai", Size(5000, completion=10), 4096)


@pytest.mark.parametrize("style", ["openai", "anthropic", "vllm", "deepseek"])
def test_every_completion_form_is_an_overflow_to_the_proxy(style: str) -> None:
    fits_alone = chat_overflow(style, Size(3000, completion=2000), 4096)
    assert is_context_overflow(fits_alone.status, fits_alone.to_bytes())
    with_functions = chat_overflow(style, Size(5000, functions=300), 4096)
    assert is_context_overflow(with_functions.status, with_functions.to_bytes())


def test_only_providers_with_a_documented_form_count_the_completion() -> None:
    size = Size(3000, completion=2000)
    assert exceeds("openai", size, 4096) and exceeds("anthropic", size, 4096)
    assert not exceeds("gemini", size, 4096) and not exceeds("llama.cpp", size, 4096)


@pytest.mark.parametrize(("body", "reserved"), [
    ({"max_tokens": 100}, 100), ({"max_completion_tokens": 50, "max_tokens": 100}, 50),
    ({"max_tokens": None}, 0), ({"max_tokens": True}, 0), ({"max_tokens": "9"}, 0), ({}, 0)])
def test_requested_completion(body: dict[str, Any], reserved: int) -> None:
    assert requested_completion(body) == reserved


async def _post(fake: FakeUpstream, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, \
            session.post(fake.url + "/chat/completions", json=payload) as response:
        return response.status, orjson.loads(await response.read())


async def test_over_http_max_tokens_pushes_a_fitting_prompt_over_the_window() -> None:
    payload = {"model": "small", "messages": [user("many words " * 100)]}
    prompt = chat_prompt_tokens(payload)
    async with FakeUpstream(limits={"small": prompt + 100},
                            window_counts_completion=True) as fake:
        assert (await _post(fake, payload))[0] == 200
        status, body = await _post(fake, {**payload, "max_completion_tokens": 101})
    assert status == 400
    assert body["error"]["message"] == (
        f"This model's maximum context length is {prompt + 100} tokens. However, you requested "
        f"{prompt + 101} tokens ({prompt} in the messages, 101 in the completion). Please reduce "
        "the length of the messages or completion.")


async def test_by_default_a_limit_is_the_prompts_and_max_tokens_is_not_counted() -> None:
    payload = {"model": "small", "messages": [user("many words " * 100)], "max_tokens": 4096}
    async with FakeUpstream(limits={"small": chat_prompt_tokens(payload)}) as fake:
        assert (await _post(fake, payload))[0] == 200


async def test_over_http_the_functions_share_is_the_reference_count_of_the_tools() -> None:
    payload = {"model": "small", "messages": [user("many words " * 100)], "tools": [TOOL]}
    prompt, functions = chat_prompt_tokens(payload), tools_tokens([TOOL])
    async with FakeUpstream(limits={"small": 50}) as fake:
        status, body = await _post(fake, payload)
    assert status == 400
    assert f"resulted in {prompt} tokens ({prompt - functions} in the messages, {functions} in " \
           "the functions)" in body["error"]["message"]
