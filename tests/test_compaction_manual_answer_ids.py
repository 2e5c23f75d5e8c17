"""The proxy's answers to `/compact` are answers of their own: a `/compact` repeated after the
first one's answer (nothing new to compact) gets other ids than that answer, as every model
answer does, while the very same request sent again (a client's retry) gets the same ones."""

from __future__ import annotations

from typing import Any

import openai

from proxy.testing.summarizer import FakeSummarizer

THREAD = {"x-thread-id": "manual-answer-ids"}
HISTORY: list[Any] = [{"role": "user", "content": "Read the config and fix the port."},
                      {"role": "assistant", "content": "Done: the port is 8080 now."},
                      {"role": "user", "content": "Thanks. Now the README."},
                      {"role": "assistant", "content": "The README says 8080 too."}]


def test_a_repeated_compact_is_answered_with_new_ids(client: openai.OpenAI, fake) -> None:
    FakeSummarizer.install(fake)
    first = client.responses.create(model="gpt-5", input=[*HISTORY, {"role": "user", "content": "/compact"}],
                                    extra_headers=THREAD)
    kept = [*HISTORY, {"role": "user", "content": "/compact"},
            first.output[0].model_dump(exclude_none=True)]
    command = [*kept, {"role": "user", "content": "/compact"}]
    second = client.responses.create(model="gpt-5", input=command, extra_headers=THREAD)
    again = client.responses.create(model="gpt-5", input=command, extra_headers=THREAD)
    assert first.output_text.startswith("[context compaction]")
    assert second.output_text.startswith("[context compaction] Nothing")
    assert second.id != first.id and second.output[0].id != first.output[0].id
    assert (again.id, again.output[0].id) == (second.id, second.output[0].id)


def test_a_repeated_compact_in_chat_is_answered_with_a_new_id(client: openai.OpenAI) -> None:
    first = client.chat.completions.create(
        model="gpt-4o", messages=[*HISTORY, {"role": "user", "content": "/compact"}],
        extra_headers=THREAD)
    command = [*HISTORY, {"role": "user", "content": "/compact"},
               {"role": "assistant", "content": first.choices[0].message.content},
               {"role": "user", "content": "/compact focus on the port"}]
    second = client.chat.completions.create(model="gpt-4o", messages=command, extra_headers=THREAD)
    assert second.choices[0].message.content.startswith("[context compaction] Nothing")
    assert second.id != first.id
