"""A tool result that comes after a user or system message (a client that let the user speak
while the tool ran, or put a reminder there) is moved back to its call, through the proxy with
the official client: the model reads the real output, never that nothing was recorded, and
every strict dialect of the fake takes the request (Mistral's too: a note stands between the
moved result and the user message)."""

from __future__ import annotations

import pytest

from proxy.core.repair import MOVED_NOTE
from proxy.core.responses_pairing import CANCELLED_TEXT
from proxy.testing.replies import Reply

CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "call_deploy1", "type": "function",
     "function": {"name": "deploy", "arguments": "{\"version\": \"1.2.3\"}"}}]}
RESULT = {"role": "tool", "tool_call_id": "call_deploy1", "content": "Deployed 1.2.3: OK"}
START = [{"role": "system", "content": "You are a release agent."},
         {"role": "user", "content": "Deploy 1.2.3."}, CALL]
SPOKEN = {"role": "user", "content": "Also update the changelog afterwards."}
REMINDER = {"role": "system", "content": "<reminder>Be concise.</reminder>"}


@pytest.mark.parametrize("dialect", ["openai", "mistral"])
def test_a_result_after_the_users_message_is_moved_back_with_a_note(
        make_fake, make_proxy, make_client, dialect: str) -> None:  # type: ignore[no-untyped-def]
    fake = make_fake(dialect=dialect)
    client = make_client(make_proxy(fake).base_url)
    fake.script(Reply.text("Deployed; updating the changelog."))
    made = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[*START, SPOKEN, RESULT], extra_headers={"x-thread-id": "late"})
    assert made.parse().choices[0].message.content == "Deployed; updating the changelog."
    assert made.headers["x-compaction"] == "applied"
    sent = fake.requests[-1].json["messages"]
    assert sent == [*START, RESULT, {"role": "assistant", "content": MOVED_NOTE}, SPOKEN]
    assert CANCELLED_TEXT not in str(sent)


def test_a_result_after_a_reminder_is_moved_back_before_it(make_fake, make_proxy,
                                                           make_client) -> None:  # type: ignore[no-untyped-def]
    fake = make_fake()
    client = make_client(make_proxy(fake).base_url)
    fake.script(Reply.text("Done."))
    client.chat.completions.create(model="gpt-4o", messages=[*START, REMINDER, RESULT],
                                   extra_headers={"x-thread-id": "late-reminder"})
    assert fake.requests[-1].json["messages"] == [*START, RESULT, REMINDER]


def test_a_result_after_the_models_next_message_is_not_its_calls(make_fake, make_proxy,
                                                                 make_client) -> None:  # type: ignore[no-untyped-def]
    """Past an assistant message the model went on without it: the call is cancelled, as
    before, and the stray result left out."""
    fake = make_fake()
    client = make_client(make_proxy(fake).base_url)
    fake.script(Reply.text("ok"))
    went_on = {"role": "assistant", "content": "Waiting for the deploy."}
    client.chat.completions.create(model="gpt-4o", messages=[*START, SPOKEN, went_on, RESULT,
                                                             {"role": "user", "content": "?"}],
                                   extra_headers={"x-thread-id": "late-past"})
    sent = fake.requests[-1].json["messages"]
    assert RESULT not in sent and CANCELLED_TEXT in str(sent)
