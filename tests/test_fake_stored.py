"""The fake's stored answers: chat completions made with `store: true`, and the endpoints on
one stored response (cancel, input items, delete)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream

USER = [{"role": "user", "content": "Say hello."}]


@pytest.fixture
def client(fake: FakeUpstream, make_client: Callable[..., openai.OpenAI]) -> openai.OpenAI:
    return make_client(fake.url)


def test_only_chat_completions_asked_to_be_stored_are_kept(client: openai.OpenAI,
                                                           fake: FakeUpstream) -> None:
    client.chat.completions.create(model="gpt-4o", messages=USER)
    streamed = client.chat.completions.create(model="gpt-4o", messages=USER, store=True,
                                              stream=True)
    made_id = {chunk.id for chunk in streamed}.pop()
    assert list(fake.stored_chat) == [made_id]
    assert client.chat.completions.retrieve(made_id).choices[0].message.content


def test_stored_chat_completions_list_by_model_and_metadata(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(model="gpt-4o", messages=USER, store=True,
                                           metadata={"topic": "a"})
    second = client.chat.completions.create(model="gpt-4o-mini", messages=USER, store=True)
    assert [c.id for c in client.chat.completions.list()] == [first.id, second.id]
    assert [c.id for c in client.chat.completions.list(order="desc")] == [second.id, first.id]
    assert [c.id for c in client.chat.completions.list(model="gpt-4o-mini")] == [second.id]
    assert [c.id for c in client.chat.completions.list(metadata={"topic": "a"})] == [first.id]


def test_a_deleted_chat_completion_is_gone(client: openai.OpenAI) -> None:
    made = client.chat.completions.create(model="gpt-4o", messages=USER, store=True)
    assert [m.id for m in client.chat.completions.messages.list(made.id)] == [f"{made.id}-0"]
    client.chat.completions.delete(made.id)
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(made.id)


def test_only_a_background_response_can_be_cancelled(client: openai.OpenAI) -> None:
    foreground = client.responses.create(model="gpt-4o", input="Hi.")
    with pytest.raises(openai.BadRequestError):
        client.responses.cancel(foreground.id)
    background = client.responses.create(model="gpt-4o", input="Hi.", background=True)
    assert background.background is True
    # The fake ends a background response at once: a cancel returns it as it ended.
    assert client.responses.cancel(background.id).status == "completed"


def test_input_items_list_what_the_response_was_made_from(client: openai.OpenAI) -> None:
    first = client.responses.create(model="gpt-4o", input="One.")
    second = client.responses.create(model="gpt-4o", input="Two.", previous_response_id=first.id)
    items: list[Any] = list(client.responses.input_items.list(second.id, order="asc"))
    texts = [i.content[0].text for i in items if i.type == "message" and i.role == "user"]
    assert texts == ["One.", "Two."] and all(i.id for i in items)
    newest_first = list(client.responses.input_items.list(second.id))
    assert [i.id for i in newest_first] == [i.id for i in reversed(items)]


def test_a_deleted_response_is_gone(client: openai.OpenAI, fake: FakeUpstream) -> None:
    made = client.responses.create(model="gpt-4o", input="Hi.")
    client.responses.delete(made.id)
    assert made.id not in fake.stored
    for call in (client.responses.retrieve, client.responses.delete,
                 client.responses.input_items.list):
        with pytest.raises(openai.NotFoundError):
            call(made.id)


def test_input_items_are_listed_a_page_at_a_time(client: openai.OpenAI) -> None:
    """20 by default, `after` the last one the client saw: the SDK's list pages through all."""
    sent = [{"role": "user", "content": f"Line {n}."} for n in range(25)]
    made = client.responses.create(model="gpt-4o", input=sent)  # type: ignore[arg-type]
    first = client.responses.input_items.list(made.id, order="asc")
    assert len(first.data) == 20 and first.has_more
    rest = client.responses.input_items.list(made.id, order="asc", after=first.data[-1].id,
                                             limit=10)
    assert len(rest.data) == 5 and not rest.has_more
    texts = [i.content[0].text for i in client.responses.input_items.list(made.id, order="asc")]
    assert texts == [f"Line {n}." for n in range(25)]
