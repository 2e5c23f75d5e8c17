"""A Responses request's `stream_options` holds only `include_obfuscation`: Chat's
`include_usage` there is OpenAI's 400 unknown_parameter, so a proxy that asked a Responses
upstream for a usage chunk as it does a chat one would be refused."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.rules import check_responses


def unknown(param: str) -> dict[str, Any]:
    return {"error": {"message": f"Unknown parameter: '{param}'.", "type": "invalid_request_error",
                      "param": param, "code": "unknown_parameter"}}


@pytest.mark.parametrize("key", ["include_usage", "continuous_usage_stats"])
def test_a_chat_stream_option_is_unknown_to_responses(key: str) -> None:
    body = {"model": "gpt-5", "input": "hi", "stream": True, "stream_options": {key: True}}
    found = check_responses(body)
    assert found is not None and (found.status, found.body) == (400, unknown(f"stream_options.{key}"))


def test_include_obfuscation_is_the_responses_stream_option() -> None:
    body = {"model": "gpt-5", "input": "hi", "stream": True,
            "stream_options": {"include_obfuscation": False}}
    assert check_responses(body) is None


async def test_over_http_it_is_a_400() -> None:
    async with FakeUpstream() as fake, aiohttp.ClientSession() as session:
        payload = {"model": "gpt-5", "input": "hi", "stream": True,
                   "stream_options": {"include_usage": True}}
        async with session.post(fake.url + "/responses", json=payload) as response:
            assert response.status == 400
            assert orjson.loads(await response.read()) == unknown("stream_options.include_usage")
