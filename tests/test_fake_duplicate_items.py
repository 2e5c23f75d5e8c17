"""An item id may appear once in what a Responses request continues: its input, the items it
names by reference, and the stored conversation it continues (`previous_response_id`). A second
one is OpenAI's 400 "Duplicate item found with id ...", also for a reference to an item the
same request sends inline."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import item_output, item_user
from proxy.testing.replies import Reply, call
from proxy.testing.rules import check_responses

KEY = {"Authorization": "Bearer sk-one"}


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession(headers=KEY) as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            return response.status, orjson.loads(await response.read())


async def made(fake: FakeUpstream, reply: Reply) -> dict[str, Any]:
    fake.script(reply)
    status, body = await post(fake, {"model": "gpt-5", "input": "go"})
    assert status == 200, body
    return body


def ref(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def duplicate(item_id: str) -> dict[str, Any]:
    return {"error": {"message": f"Duplicate item found with id {item_id}. Remove duplicate items "
                                 "from your input and try again.",
                      "type": "invalid_request_error", "param": "input", "code": None}}


async def test_a_reference_to_an_item_sent_inline_is_a_duplicate(fake: FakeUpstream) -> None:
    [message] = (await made(fake, Reply.text("Hi.")))["output"]
    status, body = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), message, ref(message["id"]), item_user("next")]})
    assert (status, body) == (400, duplicate(message["id"]))


async def test_a_reference_to_an_unstored_item_of_the_same_request_is_a_duplicate(
        fake: FakeUpstream) -> None:
    """Not the 404 of an unknown id: the request names the id twice."""
    inline = {"type": "function_call", "id": "fc_local", "call_id": "call_local",
              "name": "read_file", "arguments": "{}"}
    status, body = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), inline, ref("fc_local"), item_output("call_local")]})
    assert (status, body) == (400, duplicate("fc_local"))


async def test_two_references_to_one_item_are_a_duplicate(fake: FakeUpstream) -> None:
    [message] = (await made(fake, Reply.text("Hi.")))["output"]
    status, body = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(message["id"]), ref(message["id"]), item_user("next")]})
    assert (status, body) == (400, duplicate(message["id"]))


async def test_an_item_of_the_continued_response_sent_again_is_a_duplicate(
        fake: FakeUpstream) -> None:
    first = await made(fake, Reply.tool_calls(call("read_file", {"path": "a.py"})))
    [fc] = first["output"]
    status, body = await post(fake, {"model": "gpt-5", "previous_response_id": first["id"],
                                     "input": [fc, item_output(fc["call_id"])]})
    assert (status, body) == (400, duplicate(fc["id"]))
    status, _ = await post(fake, {"model": "gpt-5", "previous_response_id": first["id"],
                                  "input": [item_output(fc["call_id"])]})
    assert status == 200


def test_items_without_ids_and_distinct_ids_are_no_duplicates() -> None:
    fc = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "f",
          "arguments": "{}"}
    body = {"model": "gpt-5", "input": [item_user("a"), item_user("a"), fc,
                                        item_output("call_1")]}
    assert check_responses(body) is None
    again = {**body, "input": [*body["input"], item_user("b"), {**fc, "call_id": "call_2"},
                               item_output("call_2")]}
    rejection = check_responses(again)
    assert rejection is not None and rejection.body == duplicate("fc_1")
