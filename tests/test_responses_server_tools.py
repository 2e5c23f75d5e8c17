"""Server tool calls (`web_search_call`) in a Responses history, through the proxy and the
official client: relayed untouched while nothing changes, and never sent without their required
id or without their reasoning item when the proxy drops reasoning (PROTOCOL.md §2.3)."""

from __future__ import annotations

from typing import Any

from proxy.testing.replies import Reply, call

MODEL = "small-codex"
KWARGS: dict[str, Any] = dict(model=MODEL, store=False, include=["reasoning.encrypted_content"],
                              prompt_cache_key="search-thread")


def _user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def _with_search(fake, output: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turn as a model with the hosted web search tool returns it: reasoning, the search
    (its id issued with that reasoning item, as the fake issues `msg_` ids), then the answer."""
    reasoning = output[0]
    assert reasoning["type"] == "reasoning"
    nonce = reasoning["id"][3:27]
    search = {"type": "web_search_call", "id": fake.signer.item_id("ws", nonce, 1, reasoned=True),
              "status": "completed", "action": {"type": "search", "query": "aiohttp changelog"}}
    return [reasoning, search, *output[1:]]


def _dump(response) -> list[dict[str, Any]]:
    return [item.model_dump(exclude_none=True) for item in response.output]


def test_a_search_turn_survives_a_repaired_later_turn(make_fake, make_proxy, make_client) -> None:
    fake = make_fake(always_reason=True)
    proxy = make_proxy(fake)
    client = make_client(proxy.base_url)
    history = [_user("What changed in aiohttp lately?")]
    fake.script(Reply.text("Version 3.12 changed the client timeouts."))
    history += _with_search(fake, _dump(client.responses.create(input=history, **KWARGS)))

    history.append(_user("Read the changelog file."))
    fake.script(Reply.tool_calls(call("read_file", {"path": "CHANGES.rst"})))
    second = client.responses.create(input=history, **KWARGS)
    sent = fake.last("/responses").json["input"]
    assert sent[2] == history[2], "the search goes up as the client sent it"
    # The client was interrupted: the call has no output. Repair answers it, which changes the
    # history, so the reasoning items of past turns go (their blobs no longer match it).
    history += [*_dump(second), _user("Never mind, just summarize.")]
    fake.script(Reply.text("In short: new timeouts."))
    third = client.responses.create(input=history, **KWARGS)
    assert third.output_text == "In short: new timeouts."
    sent = fake.last("/responses").json["input"]
    types = [i.get("type") for i in sent]
    assert "reasoning" not in types and "web_search_call" not in types
    assert proxy.requests()[-1]["status"] == 200
