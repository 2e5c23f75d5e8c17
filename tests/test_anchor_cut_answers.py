"""An answer cut short by the output limit still anchors the next turn, streamed or not.

Upstream counted the whole prompt and the client echoes what it got (a chat `finish_reason:
length`, a Responses `status: incomplete` answer): the usage is as good as any other answer's.
"""

from __future__ import annotations

from typing import Any

import pytest

from proxy.testing.replies import Reply
from tests.harness import counted_proxy  # noqa: F401 - the fixture, as `proxy`


def _chat_turn(client: Any, messages: list[Any], stream: bool, thread: str) -> dict[str, Any]:
    headers = {"x-thread-id": thread}
    if not stream:
        answer = client.chat.completions.create(model="gpt-4o", messages=messages,
                                                extra_headers=headers)
        return answer.choices[0].message.model_dump(exclude_none=True)
    chunks = client.chat.completions.create(model="gpt-4o", messages=messages, stream=True,
                                            extra_headers=headers)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    return {"role": "assistant", "content": text}


def _responses_turn(client: Any, items: list[Any], stream: bool, thread: str) -> Any:
    headers = {"x-thread-id": thread}
    if not stream:
        return client.responses.create(model="gpt-4o", input=items, extra_headers=headers)
    for event in client.responses.create(model="gpt-4o", input=items, stream=True,
                                         extra_headers=headers):
        if event.type in ("response.completed", "response.incomplete"):
            return event.response
    raise AssertionError("the stream did not end")


@pytest.mark.parametrize("stream", [False, True])
def test_chat_answer_cut_by_length_anchors_the_next_turn(client, proxy, fake, stream) -> None:
    fake.script(Reply.length("The first half of a long"), Reply.text("ok"))
    messages: list[Any] = [{"role": "user", "content": "Write a long essay."}]
    messages.append(_chat_turn(client, messages, stream, "cut"))
    messages.append({"role": "user", "content": "Go on."})
    _chat_turn(client, messages, stream, "cut")
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]


@pytest.mark.parametrize("stream", [False, True])
def test_incomplete_responses_answer_anchors_the_next_turn(client, proxy, fake, stream) -> None:
    fake.script(Reply.length("The first half of a long"), Reply.text("ok"))
    items: list[Any] = [{"role": "user", "content": "Write a long essay."}]
    response = _responses_turn(client, items, stream, "cut")
    assert response.status == "incomplete"
    items += [o.model_dump(exclude_none=True) for o in response.output]
    items.append({"role": "user", "content": "Go on."})
    _responses_turn(client, items, stream, "cut")
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]
