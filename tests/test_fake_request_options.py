"""Request-level options the fake refuses as OpenAI does: `stream_options` on a chat request
that does not stream, and `previous_response_id` together with `conversation` (PROTOCOL.md
§1.3, §6.1), through HTTP and through the official `openai` client."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import orjson
import pytest
from openai import AsyncOpenAI

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import user

STREAM_OPTIONS_ERROR = {
    "message": "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
    "type": "invalid_request_error", "param": "stream_options", "code": None}
BOTH_HISTORIES_ERROR = {
    "message": "Mutually exclusive parameters. Ensure you are only providing one of: "
               "'previous_response_id' or 'conversation'.",
    "type": "invalid_request_error", "param": None, "code": "mutually_exclusive_parameters"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def post(fake: FakeUpstream, path: str, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + path, json=payload) as response:
            raw = await response.read()
            return response.status, (orjson.loads(raw) if response.content_type ==
                                     "application/json" else raw)


@pytest.mark.parametrize("stream", [None, False])
async def test_stream_options_without_a_stream_is_refused(fake: FakeUpstream,
                                                          stream: bool | None) -> None:
    payload: dict[str, Any] = {"model": "gpt-4o", "messages": [user("hi")],
                               "stream_options": {"include_usage": True}}
    if stream is not None:
        payload["stream"] = stream
    status, body = await post(fake, "/chat/completions", payload)
    assert status == 400 and body["error"] == STREAM_OPTIONS_ERROR
    assert fake.scripted == 0  # refused before the model: nothing consumed


async def test_stream_options_with_a_stream_and_a_null_one_are_accepted(fake: FakeUpstream) -> None:
    streamed = {"model": "gpt-4o", "messages": [user("hi")], "stream": True,
                "stream_options": {"include_usage": True}}
    assert (await post(fake, "/chat/completions", streamed))[0] == 200
    unset = {"model": "gpt-4o", "messages": [user("hi")], "stream_options": None}
    assert (await post(fake, "/chat/completions", unset))[0] == 200


async def test_stream_options_without_a_stream_through_the_client(fake: FakeUpstream) -> None:
    async with AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(model="gpt-4o", messages=[user("hi")],
                                              stream_options={"include_usage": True})
    assert refused.value.param == "stream_options"


@pytest.mark.parametrize("conversation", ["conv_1", {"id": "conv_1"}])
async def test_previous_response_id_with_a_conversation_is_refused(fake: FakeUpstream,
                                                                   conversation: Any) -> None:
    _, first = await post(fake, "/responses", {"model": "gpt-5", "input": "hi"})
    status, body = await post(fake, "/responses", {
        "model": "gpt-5", "input": "next", "previous_response_id": first["id"],
        "conversation": conversation})
    assert status == 400 and body["error"] == BOTH_HISTORIES_ERROR
    assert ("", "conv_1") not in fake.conversations  # nothing was appended to it


async def test_the_pair_is_refused_before_the_previous_response_is_looked_up(
        fake: FakeUpstream) -> None:
    status, body = await post(fake, "/responses", {
        "model": "gpt-5", "input": "x", "previous_response_id": "resp_unknown",
        "conversation": "conv_1"})
    assert status == 400 and body["error"]["code"] == "mutually_exclusive_parameters"


async def test_previous_response_id_with_a_conversation_through_the_client(
        fake: FakeUpstream) -> None:
    async with AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
        first = await api.responses.create(model="gpt-5", input="hi")
        with pytest.raises(openai.BadRequestError) as refused:
            await api.responses.create(model="gpt-5", input="next", previous_response_id=first.id,
                                       conversation="conv_1")
    assert refused.value.code == "mutually_exclusive_parameters"
