"""The fake resolves `item_reference`s as OpenAI does: a stored answer's output items (`store` on,
the default) may be named by id, per credential; the rules and the prompt count see the item
itself; an id the fake does not hold is OpenAI's 404."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import item_output, item_user
from proxy.testing.replies import Reply, call
from proxy.testing.stored_items import StoredItems

KEY = {"Authorization": "Bearer sk-one"}
OTHER_KEY = {"Authorization": "Bearer sk-two"}
LONG = " ".join(f"word{i}" for i in range(400))


@pytest.fixture
async def fake() -> AsyncIterator[FakeUpstream]:
    async with FakeUpstream(limits={"small-*": 600}) as upstream:
        yield upstream


async def post(fake: FakeUpstream, payload: dict[str, Any],
               headers: dict[str, str] = KEY) -> tuple[int, Any]:
    async with aiohttp.ClientSession(headers=headers) as session:
        async with session.post(fake.url + "/responses", json=payload) as response:
            return response.status, orjson.loads(await response.read())


async def answer(fake: FakeUpstream, reply: Reply, headers: dict[str, str] = KEY,
                 **extra: Any) -> list[dict[str, Any]]:
    """The output items of a fresh answer to "go"."""
    fake.script(reply)
    status, body = await post(fake, {"model": "gpt-5", "input": "go", **extra}, headers)
    assert status == 200, body
    return body["output"]


def ref(item: dict[str, Any] | str) -> dict[str, str]:
    return {"type": "item_reference", "id": item if isinstance(item, str) else item["id"]}


def not_found(item_id: str) -> dict[str, Any]:
    return {"error": {"message": f"Item with id '{item_id}' not found.",
                      "type": "invalid_request_error", "param": "input", "code": None}}


async def test_a_reference_is_counted_as_the_item_it_names(fake: FakeUpstream) -> None:
    [message] = await answer(fake, Reply.text(LONG))
    by_reference = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(message), item_user("next")]})
    whole = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), message, item_user("next")]})
    assert by_reference[0] == whole[0] == 200
    assert by_reference[1]["usage"]["input_tokens"] == whole[1]["usage"]["input_tokens"] > 400


async def test_a_referenced_item_counts_against_the_context_limit(fake: FakeUpstream) -> None:
    [message] = await answer(fake, Reply.text(LONG + " " + LONG))
    status, body = await post(fake, {"model": "small-model", "input": [
        item_user("go"), ref(message), item_user("next")]})
    assert status == 400 and body["error"]["code"] == "context_length_exceeded"


async def test_an_unknown_id_is_a_404(fake: FakeUpstream) -> None:
    status, body = await post(fake, {"model": "gpt-5", "input": [item_user("go"),
                                                                 ref("msg_nowhere")]})
    assert (status, body) == (404, not_found("msg_nowhere"))


async def test_an_item_of_an_unstored_answer_is_unknown(fake: FakeUpstream) -> None:
    [message] = await answer(fake, Reply.text("Hi."), store=False)
    status, body = await post(fake, {"model": "gpt-5", "input": [item_user("go"), ref(message)]})
    assert (status, body) == (404, not_found(message["id"]))


async def test_another_keys_items_are_unknown(fake: FakeUpstream) -> None:
    [message] = await answer(fake, Reply.text("Hi."), headers=OTHER_KEY)
    status, body = await post(fake, {"model": "gpt-5", "input": [item_user("go"), ref(message)]})
    assert (status, body) == (404, not_found(message["id"]))
    status, _ = await post(fake, {"model": "gpt-5", "input": [item_user("go"), ref(message)]},
                           OTHER_KEY)
    assert status == 200


async def test_a_deleted_answers_items_are_unknown(fake: FakeUpstream) -> None:
    fake.script(Reply.text("Hi."))
    _, made = await post(fake, {"model": "gpt-5", "input": "go"})
    async with aiohttp.ClientSession(headers=KEY) as session:
        async with session.delete(f"{fake.url}/responses/{made['id']}") as response:
            assert response.status == 200
    message = made["output"][0]
    status, body = await post(fake, {"model": "gpt-5", "input": [item_user("go"), ref(message)]})
    assert (status, body) == (404, not_found(message["id"]))


async def test_a_referenced_call_is_answered_by_its_output(fake: FakeUpstream) -> None:
    [fc] = await answer(fake, Reply.tool_calls(call("read_file", {"path": "a.py"})))
    answered = [item_user("go"), ref(fc), item_output(fc["call_id"])]
    assert (await post(fake, {"model": "gpt-5", "input": answered}))[0] == 200
    status, body = await post(fake, {"model": "gpt-5", "input": [*answered[:2], item_user("?")]})
    assert status == 400
    assert body["error"]["message"] == f"No tool output found for function call {fc['call_id']}."


async def test_a_referenced_reasoning_item_needs_its_following_item(fake: FakeUpstream) -> None:
    reasoning, message = await answer(fake, Reply.text("Hi.", reasoning="Think."))
    status, _ = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(reasoning), ref(message), item_user("next")]})
    assert status == 200
    status, body = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(reasoning), item_user("next")]})
    assert status == 400 and body["error"]["message"] == (
        f"Item '{reasoning['id']}' of type 'reasoning' was provided without its required "
        "following item.")


async def test_a_referenced_item_still_needs_its_reasoning_item(fake: FakeUpstream) -> None:
    reasoning, message = await answer(fake, Reply.text("Hi.", reasoning="Think."))
    status, body = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(message), item_user("next")]})
    assert status == 400 and body["error"]["message"] == (
        f"Item '{message['id']}' of type 'message' was provided without its required "
        f"'reasoning' item: '{reasoning['id']}'.")


async def test_referenced_reasoning_is_read_from_the_store_whatever_came_before(
        fake: FakeUpstream) -> None:
    """Its encrypted blob is bound to the history it was made in; a reference sends no blob,
    so an earlier history rewritten (a compaction's summary) does not invalidate it."""
    reasoning, message = await answer(fake, Reply.text("Hi.", reasoning="Think."),
                                      include=["reasoning.encrypted_content"])
    assert reasoning["encrypted_content"]
    status, _ = await post(fake, {"model": "gpt-5", "input": [
        item_user("A summary of what came before."), ref(reasoning), ref(message),
        item_user("next")]})
    assert status == 200


async def test_a_continuation_holds_the_items_not_their_references(fake: FakeUpstream) -> None:
    [message] = await answer(fake, Reply.text(LONG))
    fake.script(Reply.text("ok"))
    _, first = await post(fake, {"model": "gpt-5", "input": [item_user("go"), ref(message)]})
    _, second = await post(fake, {"model": "gpt-5", "previous_response_id": first["id"],
                                  "input": "next"})
    assert second["usage"]["input_tokens"] > first["usage"]["input_tokens"] > 400


async def test_the_store_is_used_only_with_store_on(fake: FakeUpstream) -> None:
    """`store: false` cannot name items at all: OpenAI's other 404 text (PROTOCOL.md §2.3)."""
    [message] = await answer(fake, Reply.text("Hi."))
    status, body = await post(fake, {"model": "gpt-5", "store": False,
                                     "input": [item_user("go"), ref(message)]})
    assert status == 404 and "Items are not persisted" in body["error"]["message"]


def test_the_store_is_bounded_oldest_first() -> None:
    store = StoredItems(max_items=2)
    store.remember("k", [{"id": f"msg_{n}", "type": "message"} for n in range(3)])
    resolve = store.resolver("k")
    assert resolve("msg_0") is None and resolve("msg_1") is not None and resolve("msg_2")
    assert store.resolver("other")("msg_2") is None


async def test_the_store_is_read_once_per_reference(fake: FakeUpstream) -> None:
    """The rules and the handler share one expansion, so they cannot see different items."""
    [fc] = await answer(fake, Reply.tool_calls(call("read_file", {"path": "a.py"})))
    looked_up: list[str] = []
    resolver = fake.items.resolver

    def counting(credential: str) -> Any:
        resolve = resolver(credential)
        return lambda item_id: (looked_up.append(item_id), resolve(item_id))[1]

    fake.items.resolver = counting  # type: ignore[method-assign]
    by_reference = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), ref(fc), item_output(fc["call_id"])]})
    whole = await post(fake, {"model": "gpt-5", "input": [
        item_user("go"), fc, item_output(fc["call_id"])]})
    assert looked_up == [fc["id"]]
    assert by_reference[0] == whole[0] == 200
    assert by_reference[1]["usage"]["input_tokens"] == whole[1]["usage"]["input_tokens"]
