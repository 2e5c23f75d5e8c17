"""The fake's conversations: `POST /v1/conversations` makes one, and a Responses request naming
an id that was never made (or was deleted) is OpenAI's 404, not a new empty conversation."""

from __future__ import annotations

from typing import Any

import aiohttp
import openai
import pytest
from openai import AsyncOpenAI

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import item_call


@pytest.fixture
async def fake() -> Any:
    async with FakeUpstream() as upstream:
        yield upstream


async def call(fake: FakeUpstream, method: str, path: str, payload: Any = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.request(method, fake.url + path, json=payload) as response:
            return response.status, await response.json()


def not_found(conversation_id: str) -> dict[str, Any]:
    return {"error": {"message": f"Conversation with id '{conversation_id}' not found.",
                      "type": "invalid_request_error", "param": None, "code": None}}


@pytest.mark.parametrize("named", ["conv_never_made", {"id": "conv_never_made"}])
async def test_a_response_in_an_unknown_conversation_is_a_404(fake: FakeUpstream, named: Any) -> None:
    status, body = await call(fake, "POST", "/responses",
                              {"model": "gpt-5", "input": "hi", "conversation": named})
    assert (status, body) == (404, not_found("conv_never_made"))
    assert len(fake.conversations) == 0  # none was made by naming it


async def test_a_created_conversation_holds_its_first_items_and_then_the_responses(
        fake: FakeUpstream) -> None:
    status, made = await call(fake, "POST", "/conversations",
                              {"items": [item_call("c1")], "metadata": {"topic": "demo"}})
    assert status == 200 and made["id"].startswith("conv_") and made["object"] == "conversation"
    assert made["metadata"] == {"topic": "demo"} and isinstance(made["created_at"], int)
    # its first item is a call without an output: the conversation continues from it
    status, body = await call(fake, "POST", "/responses",
                              {"model": "gpt-5", "input": "next", "conversation": made["id"]})
    assert status == 400 and body["error"]["message"] == "No tool output found for function call c1."
    assert await call(fake, "GET", f"/conversations/{made['id']}") == (200, made)


async def test_a_deleted_conversation_is_unknown(fake: FakeUpstream) -> None:
    _, made = await call(fake, "POST", "/conversations", {})
    status, first = await call(fake, "POST", "/responses",
                               {"model": "gpt-5", "input": "hi", "conversation": made["id"]})
    assert status == 200 and first["conversation"] == {"id": made["id"]}
    assert await call(fake, "DELETE", f"/conversations/{made['id']}") == (
        200, {"id": made["id"], "object": "conversation.deleted", "deleted": True})
    for method, path, payload in (
            ("POST", "/responses", {"model": "gpt-5", "input": "x", "conversation": made["id"]}),
            ("GET", f"/conversations/{made['id']}", None),
            ("DELETE", f"/conversations/{made['id']}", None)):
        assert await call(fake, method, path, payload) == (404, not_found(made["id"]))


async def test_the_official_client_creates_and_uses_a_conversation(fake: FakeUpstream) -> None:
    async with AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
        conversation = await api.conversations.create()
        first = await api.responses.create(model="gpt-5", input="hi", conversation=conversation.id)
        assert first.conversation is not None and first.conversation.id == conversation.id
        with pytest.raises(openai.NotFoundError) as missing:
            await api.responses.create(model="gpt-5", input="hi", conversation="conv_typo")
    assert missing.value.body["message"] == "Conversation with id 'conv_typo' not found."
