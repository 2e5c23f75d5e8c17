"""Responses `truncation` (PROTOCOL.md §6.1): "disabled" (the default) answers an over-long
input with the overflow error; "auto" drops input items from the beginning until it fits, and
the response says which mode it ran with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from openai import AsyncOpenAI

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import item_user

LIMIT = 300
HISTORY = [item_user(f"turn {n}: " + "many words " * 40) for n in range(6)]


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(limits={"small-*": LIMIT}) as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            return response.status, orjson.loads(await response.read())


async def test_the_response_echoes_its_truncation_mode(fake: FakeUpstream) -> None:
    _, default = await post(fake, {"model": "gpt-5", "input": "hi"})
    _, auto = await post(fake, {"model": "gpt-5", "input": "hi", "truncation": "auto"})
    assert default["truncation"] == "disabled" and auto["truncation"] == "auto"


async def test_disabled_truncation_overflows(fake: FakeUpstream) -> None:
    status, body = await post(fake, {"model": "small-1", "input": HISTORY})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


async def test_auto_truncation_drops_the_oldest_items_until_the_input_fits(
        fake: FakeUpstream) -> None:
    status, body = await post(fake, {"model": "small-1", "input": HISTORY, "truncation": "auto",
                                     "instructions": "Be brief."})
    assert status == 200, body
    kept = body["usage"]["input_tokens"]
    assert 0 < kept <= LIMIT
    _, last_only = await post(fake, {"model": "small-1", "input": HISTORY[-1:],
                                     "instructions": "Be brief.", "truncation": "auto"})
    assert kept >= last_only["usage"]["input_tokens"]  # the newest item and the instructions stay


async def test_auto_truncation_cannot_cut_the_newest_item(fake: FakeUpstream) -> None:
    huge = [item_user("old"), item_user("many words " * 400)]
    status, body = await post(fake, {"model": "small-1", "input": huge, "truncation": "auto"})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


async def test_auto_truncation_through_the_client(fake: FakeUpstream) -> None:
    async with AsyncOpenAI(base_url=fake.url, api_key="sk-test", max_retries=0) as api:
        response = await api.responses.create(model="small-1", input=HISTORY,  # type: ignore[arg-type]
                                              truncation="auto")
    assert response.truncation == "auto"
    assert response.usage is not None and response.usage.input_tokens <= LIMIT
