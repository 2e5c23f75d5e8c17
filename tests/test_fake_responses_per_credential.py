"""A stored response belongs to the credential that made it, as OpenAI keeps it in the project of
the key: another key cannot continue, retrieve, list, cancel or delete it, and is answered as
for an id never made. Checked with the official client, against the fake and through the proxy."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.response_store import Stored, StoredResponses
from tests.harness import RunningProxy

KEY_A = "sk-project-a-0123456789"
KEY_B = "sk-project-b-0123456789"


def _clients(base_url: str,
             make_client: Callable[..., openai.OpenAI]) -> tuple[openai.OpenAI, openai.OpenAI]:
    return make_client(base_url, KEY_A), make_client(base_url, KEY_B)


def _another_key_cannot_use(owner: openai.OpenAI, other: openai.OpenAI) -> None:
    made = owner.responses.create(model="gpt-4o", input="Remember 7.")
    with pytest.raises(openai.BadRequestError) as refused:
        other.responses.create(model="gpt-4o", input="Which number?",
                               previous_response_id=made.id)
    assert refused.value.body == {
        "message": f"Previous response with id '{made.id}' not found.",
        "type": "invalid_request_error", "param": "previous_response_id",
        "code": "previous_response_not_found"}
    for call in (other.responses.retrieve, other.responses.input_items.list,
                 other.responses.cancel, other.responses.delete):
        with pytest.raises(openai.NotFoundError) as missing:
            call(made.id)
        assert missing.value.body["message"] == f"Response with id '{made.id}' not found."
    # still there for its own key, untouched by the other's delete
    assert owner.responses.retrieve(made.id).id == made.id
    assert owner.responses.create(model="gpt-4o", input="Which number?",
                                  previous_response_id=made.id).id
    owner.responses.delete(made.id)


def test_another_key_cannot_use_a_stored_response(
        fake: FakeUpstream, make_client: Callable[..., openai.OpenAI]) -> None:
    _another_key_cannot_use(*_clients(fake.url, make_client))


def test_another_key_cannot_use_a_stored_response_through_the_proxy(
        fake: FakeUpstream, proxy: RunningProxy,
        make_client: Callable[..., openai.OpenAI]) -> None:
    _another_key_cannot_use(*_clients(proxy.base_url, make_client))


def test_stored_responses_are_bounded_least_recently_used_first() -> None:
    store = StoredResponses(max_responses=2)
    for n in range(2):
        store.put("k", f"resp_{n}", Stored([], {"id": f"resp_{n}"}))
    assert store.get("k", "resp_0") is not None  # now the most recently used
    store.put("k", "resp_2", Stored([], {"id": "resp_2"}))
    assert list(store) == ["resp_0", "resp_2"] and "resp_1" not in store
    assert store.get("other", "resp_2") is None and store.pop("other", "resp_2") is None
    assert store.pop("k", "resp_2") is not None and len(store) == 1


def test_a_conversation_is_continued_only_by_the_key_that_holds_it(
        fake: FakeUpstream, make_client: Callable[..., openai.OpenAI]) -> None:
    """Another key naming the conversation is answered as for an id never made."""
    owner, other = _clients(fake.url, make_client)
    shared = owner.conversations.create().id
    long_input = " ".join(f"word{n}" for n in range(300))
    owner.responses.create(model="gpt-4o", input=long_input, conversation=shared)
    continued = owner.responses.create(model="gpt-4o", input="And?", conversation=shared)
    assert continued.usage is not None and continued.usage.input_tokens > 300
    with pytest.raises(openai.NotFoundError) as missing:
        other.responses.create(model="gpt-4o", input="And?", conversation=shared)
    assert missing.value.body["message"] == f"Conversation with id '{shared}' not found."
    for call in (other.conversations.retrieve, other.conversations.delete):
        with pytest.raises(openai.NotFoundError):
            call(shared)
    assert owner.conversations.retrieve(shared).id == shared
