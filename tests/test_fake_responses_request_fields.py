"""Request-level rules of a Responses request the fake applies as OpenAI does: a request with
nothing to answer (no input, or an empty one, and no earlier state) is refused, and
`stream_options` holds only `include_obfuscation`: Chat's `include_usage` there is a 400
unknown_parameter, so a proxy that asked a Responses upstream for a usage chunk as it does a
chat one would be refused."""

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


def test_a_request_with_no_input_is_refused_before_an_unknown_option() -> None:
    found = check_responses({"model": "gpt-5", "stream": True,
                             "stream_options": {"include_usage": True}})
    assert found is not None and found.body == {"error": {
        "message": "Missing required parameter: 'input'.", "type": "invalid_request_error",
        "param": "input", "code": "missing_required_parameter"}}


@pytest.mark.parametrize("empty", ["", []])
def test_an_empty_input_is_refused_after_an_unknown_option(empty: Any) -> None:
    found = check_responses({"model": "gpt-5", "input": empty})
    assert found is not None and found.body == {"error": {
        "message": "One of \"input\" or \"previous_response_id\" or 'prompt' or 'conversation' "
                   "must be provided.", "type": "invalid_request_error", "param": None,
        "code": "missing_required_parameter"}}
    found = check_responses({"model": "gpt-5", "input": empty, "stream": True,
                             "stream_options": {"include_usage": True}})
    assert found is not None and found.body == unknown("stream_options.include_usage")


def test_an_empty_input_continuing_earlier_state_is_accepted() -> None:
    assert check_responses({"model": "gpt-5", "input": [], "previous_response_id": "resp_1"}) is None
    assert check_responses({"model": "gpt-5", "conversation": "conv_1"}) is None
