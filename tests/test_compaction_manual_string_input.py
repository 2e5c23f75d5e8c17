"""`/compact` as a Responses request's string `input` (the one user message, the way
`client.responses.create(input="...")` sends it): the last user message is the command, so
the proxy answers it itself (SPEC §8) and says there is nothing before it to compact; the
command never goes to the model. Any other string input still goes up as sent."""

from __future__ import annotations

import openai
import pytest

from proxy.compaction.manual import MARKER


@pytest.mark.parametrize("command", ["/compact", "  /compact keep the API names  "])
def test_a_string_input_that_is_the_command_is_answered_not_forwarded(
        client: openai.OpenAI, fake, proxy, command: str) -> None:
    raw = client.responses.with_raw_response.create(model="gpt-5", input=command,
                                                    extra_headers={"x-thread-id": "lone"})
    answer = raw.parse()
    assert raw.status_code == 200 and raw.headers["x-compaction"] == "none"
    assert answer.output_text.startswith(f"{MARKER} Nothing")
    events = list(client.responses.create(model="gpt-5", input=command, stream=True))
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == answer.output_text
    assert fake.requests == [], "the command went to the model"
    assert proxy.requests()[-1]["manual_compact"] is True


def test_any_other_string_input_goes_up_as_sent(client: openai.OpenAI, fake) -> None:
    answer = client.responses.create(model="gpt-5", input="/compaction of the logs, please")
    assert answer.output_text and len(fake.requests) == 1
    assert fake.requests[0].json["input"] == "/compaction of the logs, please"
