"""Context-overflow answers of the fake, per provider style, with their exact payloads."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from proxy.compaction.overflow import is_context_overflow
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import user
from proxy.testing.overflow import OVERFLOW_STYLES, chat_overflow
from proxy.testing.reference_tokens import chat_prompt_tokens

EXPECTED: dict[str, Any] = {
    "openai": {"error": {"message": "This model's maximum context length is 100 tokens. However, your "
                         "messages resulted in 150 tokens. Please reduce the length of the messages.",
                         "type": "invalid_request_error", "param": "messages",
                         "code": "context_length_exceeded"}},
    "responses": {"error": {"message": "Your input exceeds the context window of this model. Please "
                            "adjust your input and try again.", "type": "invalid_request_error",
                            "param": "input", "code": "context_length_exceeded"}},
    "anthropic": {"type": "error", "error": {"type": "invalid_request_error",
                                             "message": "prompt is too long: 150 tokens > 100 maximum"},
                  "request_id": "req_fake0000000000000000"},
    "llama.cpp": {"error": {"code": 400, "message": "request (150 tokens) exceeds the available context "
                            "size (100 tokens), try increasing it", "type": "exceed_context_size_error",
                            "n_prompt_tokens": 150, "n_ctx": 100}},
    "vllm": {"error": {"message": "This model's maximum context length is 100 tokens. However, your "
                       "request has 150 input tokens. Please reduce the length of the input messages.",
                       "type": "BadRequestError", "param": None, "code": 400}},
    "openrouter": {"error": {"message": "This endpoint's maximum context length is 100 tokens. However, "
                             "you requested about 150 tokens (150 of text input). Please reduce the "
                             "length of either one, or use the \"middle-out\" transform to compress "
                             "your prompt automatically.", "code": 400}},
    "gemini": [{"error": {"code": 400, "message": "The input token count (150) exceeds the maximum "
                          "number of tokens allowed (100).", "status": "INVALID_ARGUMENT"}}],
    "groq": {"error": {"message": "Please reduce the length of the messages or completion.",
                       "type": "invalid_request_error", "param": "messages",
                       "code": "context_length_exceeded"}},
    "cerebras": {"message": "Please reduce the length of the messages or completion. Current length is "
                 "150 while limit is 100", "type": "invalid_request_error", "param": "messages",
                 "code": "context_length_exceeded"},
    "deepseek": {"error": {"message": "This model's maximum context length is 100 tokens. However, you "
                           "requested 150 tokens (150 in the messages, 0 in the completion). Please "
                           "reduce the length of the messages or completion.",
                           "type": "invalid_request_error", "param": None,
                           "code": "invalid_request_error"}},
    "mistral": {"object": "error", "message": "Prompt contains 150 tokens and 0 draft tokens, too large "
                "for model with 100 maximum context length", "type": "invalid_request_error",
                "param": None, "code": None},
    "bedrock": {"message": "The model returned the following errors: prompt is too long: 150 "
                           "tokens > 100 maximum"},
    "xai": {"error": {"message": "This model's maximum prompt length is 100 but the request "
                      "contains 150 tokens.", "type": "invalid_request_error", "param": None,
                      "code": None}},
    "moonshot": {"error": {"message": "Invalid request: Your request exceeded model token limit: "
                           "100", "type": "invalid_request_error"}, "type": "error"},
    "lm-studio": {"error": {"message": "Trying to keep the first 150 tokens when context the "
                            "overflows. However, the model is loaded with context length of only "
                            "100 tokens, which is not enough.", "type": "invalid_request_error",
                            "param": None, "code": None}},
}


@pytest.mark.parametrize("style", sorted(EXPECTED))
def test_each_style_has_the_providers_payload(style: str) -> None:
    rejection = chat_overflow(style, 150, 100)
    assert rejection.status == 400 and rejection.body == EXPECTED[style]


@pytest.mark.parametrize("style", sorted(EXPECTED))
def test_the_proxy_recognizes_each_styles_overflow(style: str) -> None:
    rejection = chat_overflow(style, 150, 100)
    assert is_context_overflow(rejection.status, rejection.to_bytes())


def test_every_style_is_covered_and_unknown_styles_fail() -> None:
    assert set(OVERFLOW_STYLES) == set(EXPECTED) | {"ollama"}
    with pytest.raises(ValueError):
        chat_overflow("nope", 1, 1)
    with pytest.raises(ValueError):
        FakeUpstream(overflow_style="nope")


@pytest.mark.parametrize("style", ["anthropic", "gemini", "llama.cpp"])
async def test_styles_over_http_carry_the_real_counts(style: str) -> None:
    payload = {"model": "small", "messages": [user("many words " * 100)]}
    tokens = chat_prompt_tokens(payload)
    async with FakeUpstream(limits={"small": 50}, overflow_style=style) as fake, \
            aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/chat/completions", json=payload) as response:
            assert response.status == 400
            assert orjson.loads(await response.read()) == chat_overflow(style, tokens, 50).body


async def test_ollama_silently_truncates() -> None:
    payload = {"model": "small", "messages": [user("many words " * 100)]}
    async with FakeUpstream(limits={"small": 50}, overflow_style="ollama") as fake, \
            aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/chat/completions", json=payload) as response:
            assert response.status == 200
            assert (await response.json())["usage"]["prompt_tokens"] == 50
