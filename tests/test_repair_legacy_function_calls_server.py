"""A legacy function-calling client whose last call was interrupted, through the proxy with the
real `openai` client: the fake upstream refuses a `function_call` the next message does not
answer, so the proxy's repair answers it as cancelled (a `function` message of its name, never
a success) and the client gets the model's answer, not the fake's 400 (SPEC §5)."""

from __future__ import annotations

from typing import Any

import openai
import orjson

from proxy.core.repair import CANCELLED_TEXT, INTERRUPTED_NOTE
from proxy.testing.replies import Reply
from proxy.testing.rules import check_chat
from tests.client_shapes import FUNCTIONS
from tests.conftest import API_KEY

INTERRUPTED = {"role": "assistant", "content": None,
               "function_call": {"name": "read_file", "arguments": '{"path": "src/app.py"}'}}


def test_an_unanswered_legacy_call_reaches_the_model_answered_as_cancelled(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Read src/app.py."},
        INTERRUPTED,  # the client was stopped before the function ran
        {"role": "user", "content": "Never mind, just say hello."}]
    assert check_chat({"messages": messages}) is not None  # as sent, the fake refuses it
    fake.script(Reply.text("Hello."))
    with openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=30) as client:
        answer = client.chat.completions.create(model="gpt-4o", messages=messages, functions=FUNCTIONS)

    assert answer.choices[0].message.content == "Hello."
    (request,) = fake.requests
    sent = orjson.loads(request.body)["messages"]
    assert sent == [*messages[:3], {"role": "function", "name": "read_file", "content": CANCELLED_TEXT},
                    {"role": "assistant", "content": INTERRUPTED_NOTE}, messages[3]]
    assert check_chat({"messages": sent}) is None
