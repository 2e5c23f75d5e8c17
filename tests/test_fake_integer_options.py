"""Integer options the fake refuses as OpenAI does, before anything else is answered: `n` out
of 1-128, the chat output caps below 1, Responses' `max_output_tokens` below 16, and any of
them not an integer. A null is the option unset; dialects of other providers do not check."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.messages import user
from proxy.testing.replies import Reply
from tests.test_fake_choices import fake  # noqa: F401 - the fixture
from tests.test_fake_openai_client import client

TEXT = "Fine."


def _refusal(key: str, message: str, code: str) -> dict[str, Any]:
    return {"message": message, "type": "invalid_request_error", "param": key, "code": code}


@pytest.mark.parametrize(("key", "value", "message", "code"), [
    ("n", 0, "Invalid 'n': integer below minimum value. Expected a value >= 1, but got 0 "
             "instead.", "integer_below_min_value"),
    ("n", 129, "Invalid 'n': integer above maximum value. Expected a value <= 128, but got 129 "
               "instead.", "integer_above_max_value"),
    ("n", "2", "Invalid type for 'n': expected an integer, but got a string instead.",
     "invalid_type"),
    ("n", True, "Invalid type for 'n': expected an integer, but got a boolean instead.",
     "invalid_type"),
    ("n", 1.5, "Invalid type for 'n': expected an integer, but got a decimal number instead.",
     "invalid_type"),
    ("max_tokens", -1, "Invalid 'max_tokens': integer below minimum value. Expected a value >= 1, "
                       "but got -1 instead.", "integer_below_min_value"),
    ("max_tokens", "64", "Invalid type for 'max_tokens': expected an integer, but got a string "
                         "instead.", "invalid_type"),
    ("max_completion_tokens", 0, "Invalid 'max_completion_tokens': integer below minimum value. "
                                 "Expected a value >= 1, but got 0 instead.",
     "integer_below_min_value"),
])
async def test_a_chat_option_out_of_range_or_not_an_integer_is_refused(
        fake: FakeUpstream, key: str, value: Any, message: str, code: str) -> None:
    fake.script(Reply.text(TEXT))
    async with client(fake) as api:
        with pytest.raises(openai.BadRequestError) as refused:
            await api.chat.completions.create(model="gpt-4o", messages=[user("hi")],
                                              extra_body={key: value})
        assert refused.value.body == _refusal(key, message, code)
        # A refused request consumes no scripted reply; a null is the option unset.
        done = await api.chat.completions.create(model="gpt-4o", messages=[user("hi")],
                                                 extra_body={key: None})
    assert [c.message.content for c in done.choices] == [TEXT]


@pytest.mark.parametrize(("value", "message", "code"), [
    (10, "Invalid 'max_output_tokens': integer below minimum value. Expected a value >= 16, but "
         "got 10 instead.", "integer_below_min_value"),
    ("16", "Invalid type for 'max_output_tokens': expected an integer, but got a string "
           "instead.", "invalid_type"),
])
async def test_a_responses_output_cap_below_16_or_not_an_integer_is_refused(
        fake: FakeUpstream, value: Any, message: str, code: str) -> None:
    fake.script(Reply.text(TEXT))
    async with client(fake) as api:
        with pytest.raises(openai.BadRequestError) as refused:
            await api.responses.create(model="gpt-5", input="hi",
                                       extra_body={"max_output_tokens": value})
        assert refused.value.body == _refusal("max_output_tokens", message, code)
        done = await api.responses.create(model="gpt-5", input="hi", max_output_tokens=16)
    assert done.output_text == TEXT


async def test_another_providers_dialect_does_not_check_them() -> None:
    async with FakeUpstream(dialect="mistral") as fake, client(fake) as api:
        fake.script(Reply.text(TEXT))
        done = await api.chat.completions.create(model="mistral-large", messages=[user("hi")],
                                                 extra_body={"n": "2", "max_tokens": 0})
    assert [c.message.content for c in done.choices] == [TEXT]
