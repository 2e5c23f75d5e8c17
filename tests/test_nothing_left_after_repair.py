"""A request of which repair would leave nothing (every message a tool result without its call)
goes up as the client sent it: the upstream's own error says what is wrong with it, as it would
have without the proxy. Repair used to send an empty list, refused for being empty, an error
about a request the client never sent."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from proxy.testing.rules import check_chat, check_responses

ORPHAN_RESULT = {"role": "tool", "tool_call_id": "call_gone", "content": "42 lines"}
ORPHAN_OUTPUT = {"type": "function_call_output", "call_id": "call_gone", "output": "42 lines"}


def _sent(fake: Any, path: str) -> list[Any]:
    return [r.json for r in fake.requests if r.path.endswith(path)]


@pytest.mark.parametrize("thread", [None, "orphans"])
def test_a_chat_request_of_orphan_results_gets_the_upstreams_own_refusal(
        client: openai.OpenAI, fake: Any, thread: str | None) -> None:
    messages = [ORPHAN_RESULT, {**ORPHAN_RESULT, "tool_call_id": "call_other"}]
    direct = check_chat({"model": "gpt-4o", "messages": messages})
    assert direct is not None
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(
            model="gpt-4o", messages=messages,  # type: ignore[arg-type]
            extra_headers={"x-thread-id": thread} if thread else None)
    assert refused.value.body == direct.body["error"]
    assert _sent(fake, "/chat/completions") == [{"model": "gpt-4o", "messages": messages}]


def test_a_responses_request_of_orphan_outputs_gets_the_upstreams_own_refusal(
        client: openai.OpenAI, fake: Any) -> None:
    direct = check_responses({"model": "gpt-4o", "input": [ORPHAN_OUTPUT]})
    assert direct is not None
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="gpt-4o", input=[ORPHAN_OUTPUT],  # type: ignore[list-item]
                                extra_headers={"x-thread-id": "orphans"})
    assert refused.value.body == direct.body["error"]
    assert _sent(fake, "/responses") == [{"model": "gpt-4o", "input": [ORPHAN_OUTPUT]}]


def test_an_orphan_result_after_a_message_still_goes(client: openai.OpenAI, fake: Any) -> None:
    """Repair keeps its work where something is left: the result without its call goes."""
    user = {"role": "user", "content": "Go on."}
    answer = client.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=[user, ORPHAN_RESULT],  # type: ignore[list-item]
        extra_headers={"x-thread-id": "orphans"})
    assert answer.status_code == 200 and answer.headers["x-compaction"] == "applied"
    assert _sent(fake, "/chat/completions")[-1]["messages"] == [user]
