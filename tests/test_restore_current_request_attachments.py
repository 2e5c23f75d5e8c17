"""The user's current request keeps its images, audio clips and files when a compaction
summarizes it (an agent's long tool loop after one request): they go along after the quote of
its text, as the client sent them (SPEC §4: the latest user message is never cut). An older
user message's are left to a note, as before."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import HEADER, collect
from proxy.conversation import Api
from proxy.settings import RestoreSettings
from proxy.testing.replies import Reply, call
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, system,
                                           tool_result, user)

IMAGE = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo=",
                                            "detail": "low"}}
AUDIO = {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
R_IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=",
           "detail": "low"}


def _request(parts: list[Any]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "Fix the misaligned button."},
                                        *parts]}


def _loop(n: int) -> list[dict[str, Any]]:
    return [m for i in range(n) for m in (assistant_calls((f"c{i}", "run", {"cmd": "ls"})),
                                          tool_result(f"c{i}", "ok"))]


def _users_message(elements: list[dict[str, Any]], api: Api = Api.CHAT,
                   cut: int = 5) -> dict[str, Any]:
    entries = conv(api, elements)
    restored = collect(entries, Cutoff(index=cut, lead=1, start=1, strategy=PARTIAL),
                       RestoreSettings(user_messages_tokens=2000), count)
    (message,) = restored.users
    return message


@pytest.mark.parametrize("parts", [[IMAGE], [IMAGE, AUDIO]])
def test_the_current_requests_attachments_follow_its_quote(parts: list[Any]) -> None:
    message = _users_message([system(), _request(parts), *_loop(3)])
    text, *attached = message["content"]
    assert attached == parts
    assert "Fix the misaligned button." in text["text"] and "follow this quote" in text["text"]
    assert "not restored" not in text["text"]


def test_an_older_messages_attachments_are_left_to_a_note() -> None:
    message = _users_message([system(), _request([IMAGE]), assistant("done"), *_loop(1),
                              user("now the footer")], cut=5)
    assert isinstance(message["content"], str) and "it is not restored" in message["content"]


def test_responses_current_request_keeps_its_image() -> None:
    request = {"type": "message", "role": "user",
               "content": [{"type": "input_text", "text": "What is wrong here?"}, R_IMAGE]}
    calls = [item for i in range(3) for item in (
        {"type": "function_call", "call_id": f"c{i}", "name": "run", "arguments": "{}"},
        {"type": "function_call_output", "call_id": f"c{i}", "output": "ok"})]
    developer = {"type": "message", "role": "developer", "content": "Be brief."}
    message = _users_message([developer, request, *calls], Api.RESPONSES, cut=6)
    assert message["content"][0]["type"] == "input_text"
    assert message["content"][1:] == [R_IMAGE]


def test_through_the_proxy_the_compacted_request_still_shows_the_screenshot(
        make_fake, make_proxy, make_client) -> None:  # type: ignore[no-untyped-def]
    fake = make_fake(limits={"small-*": 4000})
    summarizer = FakeSummarizer.install(fake)
    client = make_client(make_proxy(fake, models={"small-*": {"max_input_tokens": 4000}}).base_url)
    messages: list[Any] = [system(), _request([IMAGE])]
    for step in range(30):
        fake.script(Reply.tool_calls(call("run", {"cmd": f"grep -rn button src/ # {step}"})))
        answer = client.chat.completions.create(model="small-1", messages=messages,
                                                extra_headers={"x-thread-id": "screenshot"})
        if summarizer.calls:
            break
        made = answer.choices[0].message
        messages += [made.model_dump(exclude_none=True, exclude={"refusal", "annotations"}),
                     tool_result(made.tool_calls[0].id, "src/x.css: " + "match " * 150)]
    assert summarizer.calls, "no compaction happened"
    sent = [r.json for r in fake.requests if not is_summarizer_request(r.json)][-1]["messages"]
    quoting = [m for m in sent if isinstance(m.get("content"), list)
               and any(p.get("type") == "text" and "misaligned" in p["text"] for p in m["content"])]
    assert [m["content"][0]["text"].startswith(HEADER) for m in quoting] == [True]
    assert quoting[0]["content"][1:] == [IMAGE]
