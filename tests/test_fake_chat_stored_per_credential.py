"""A stored chat completion belongs to the credential that made it, as a stored response does:
another key's list leaves it out, and retrieving, updating, deleting it or listing its
messages answers as for an id never made. Checked with the official client, against the fake
and through the proxy."""

from __future__ import annotations

from collections.abc import Callable

import openai
import pytest

from proxy.testing import stored_chat
from proxy.testing.fake_upstream import FakeUpstream
from tests.harness import RunningProxy

KEY_A = "sk-project-a-0123456789"
KEY_B = "sk-project-b-0123456789"
USER = [{"role": "user", "content": "Say hello."}]


def _another_key_cannot_see(owner: openai.OpenAI, other: openai.OpenAI) -> None:
    made = owner.chat.completions.create(model="gpt-4o", messages=USER, store=True)
    theirs = other.chat.completions.create(model="gpt-4o", messages=USER, store=True)
    assert [c.id for c in other.chat.completions.list()] == [theirs.id]
    for call in (other.chat.completions.retrieve, other.chat.completions.delete,
                 other.chat.completions.messages.list,
                 lambda i: other.chat.completions.update(i, metadata={"k": "v"})):
        with pytest.raises(openai.NotFoundError) as missing:
            call(made.id)
        assert missing.value.body["message"] == f"Chat completion with id '{made.id}' not found."
    # still there for its own key, untouched by the other's delete
    assert [c.id for c in owner.chat.completions.list()] == [made.id]
    assert owner.chat.completions.retrieve(made.id).id == made.id


def test_another_key_cannot_see_a_stored_chat_completion(
        fake: FakeUpstream, make_client: Callable[..., openai.OpenAI]) -> None:
    _another_key_cannot_see(make_client(fake.url, KEY_A), make_client(fake.url, KEY_B))


def test_another_key_cannot_see_a_stored_chat_completion_through_the_proxy(
        fake: FakeUpstream, proxy: RunningProxy,
        make_client: Callable[..., openai.OpenAI]) -> None:
    _another_key_cannot_see(make_client(proxy.base_url, KEY_A),
                            make_client(proxy.base_url, KEY_B))


def test_stored_chat_completions_are_bounded_oldest_first_and_listed_as_made(
        fake: FakeUpstream, make_client: Callable[..., openai.OpenAI],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stored_chat, "MAX_STORED", 2)
    client = make_client(fake.url, KEY_A)
    first, second = (client.chat.completions.create(model="gpt-4o", messages=USER, store=True)
                     for _ in range(2))
    client.chat.completions.retrieve(first.id)  # reading one does not move it in the list
    assert [c.id for c in client.chat.completions.list()] == [first.id, second.id]
    third = client.chat.completions.create(model="gpt-4o", messages=USER, store=True)
    assert list(fake.stored_chat) == [second.id, third.id]
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.retrieve(first.id)
