"""A custom (freeform) tool call's item id begins with 'ctc', as OpenAI checks it on input; the
fake issues such ids and takes them back, and refuses a call replayed with a function call's
`fc_` id (or any other) with OpenAI's `invalid_id_prefix` text."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import item_user
from proxy.testing.replies import Reply, call
from proxy.testing.rules import check_responses


def custom_call(item_id: str | None) -> dict[str, Any]:
    item = {"type": "custom_tool_call", "call_id": "call_p", "name": "apply_patch",
            "input": "*** Begin Patch"}
    return item if item_id is None else {**item, "id": item_id}


OUTPUT = {"type": "custom_tool_call_output", "call_id": "call_p", "output": "ok"}


def request(item_id: str | None) -> dict[str, Any]:
    return {"model": "gpt-5", "input": [item_user("patch it"), custom_call(item_id), OUTPUT]}


@pytest.mark.parametrize("item_id", ["fc_0123", "call_p", "item_1"])
def test_a_custom_tool_call_id_of_another_prefix_is_refused(item_id: str) -> None:
    refused = check_responses(request(item_id))
    assert refused is not None and refused.status == 400
    assert refused.body["error"] == {
        "message": f"Invalid 'input[1].id': '{item_id}'. Expected an ID that begins with 'ctc'.",
        "type": "invalid_request_error", "param": "input[1].id", "code": "invalid_id_prefix"}


@pytest.mark.parametrize("item_id", [None, "ctc_0123"])
def test_a_custom_tool_call_with_its_own_prefix_or_no_id_is_accepted(item_id: str | None) -> None:
    assert check_responses(request(item_id)) is None


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream() as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: dict[str, Any]) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            return response.status, orjson.loads(await response.read())


async def test_an_issued_custom_call_echoed_back_is_accepted_and_a_retyped_id_refused(
        fake: FakeUpstream) -> None:
    fake.script(Reply.tool_calls(call("apply_patch", "*** Begin Patch", custom=True)))
    _, first = await post(fake, {"model": "gpt-5", "input": "patch it", "store": False})
    [issued] = first["output"]
    assert issued["type"] == "custom_tool_call" and issued["id"].startswith("ctc_")
    answer = {"type": "custom_tool_call_output", "call_id": issued["call_id"], "output": "ok"}
    history = [item_user("patch it"), issued, answer]
    status, _ = await post(fake, {"model": "gpt-5", "input": history, "store": False})
    assert status == 200
    retyped = {**issued, "id": "fc_" + issued["id"][4:]}
    status, body = await post(fake, {"model": "gpt-5", "input": [history[0], retyped, answer],
                                     "store": False})
    assert status == 400 and body["error"]["code"] == "invalid_id_prefix"
    assert body["error"]["param"] == "input[1].id"
