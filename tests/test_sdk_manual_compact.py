"""`/compact` answered by the proxy itself, read through the official client's helpers: the
chat `stream` helper, the Responses `stream` helper and raw responses accept its synthetic
answer as they accept a model's."""

from __future__ import annotations

import openai

HISTORY = [{"role": "user", "content": "Hello."}, {"role": "assistant", "content": "Hi."},
           {"role": "user", "content": "/compact"}]
THREAD = {"x-thread-id": "sdk-manual"}


async def test_chat_stream_helper_reads_the_proxys_answer(aclient: openai.AsyncOpenAI,
                                                           fake) -> None:
    async with aclient.chat.completions.stream(model="gpt-4o", messages=HISTORY,
                                               stream_options={"include_usage": True},
                                               extra_headers=THREAD) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_completion()
    assert kinds.count("content.done") == 1
    assert final.choices[0].message.content and final.choices[0].finish_reason == "stop"
    assert final.usage is not None
    assert fake.requests == [], "the command is answered, not sent to the model"


def test_responses_stream_helper_reads_the_proxys_answer(client: openai.OpenAI, fake) -> None:
    with client.responses.stream(model="gpt-5", input=HISTORY, extra_headers=THREAD) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    assert final.status == "completed" and final.output_text
    raw = client.responses.with_raw_response.create(model="gpt-5", input=HISTORY,
                                                    extra_headers=THREAD)
    assert raw.headers["x-compaction"] == "none" and raw.parse().output_text
    assert fake.requests == []


def test_n_choices_each_carry_the_answer(client: openai.OpenAI, fake) -> None:
    made = client.chat.completions.create(model="gpt-4o", messages=HISTORY, n=2,
                                          extra_headers=THREAD)
    assert [c.index for c in made.choices] == [0, 1]
    assert made.choices[0].message.content == made.choices[1].message.content
    assert made.choices[0].message.content
    texts = {0: "", 1: ""}
    for chunk in client.chat.completions.create(model="gpt-4o", messages=HISTORY, n=2,
                                                stream=True, extra_headers=THREAD):
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts[0] == texts[1] == made.choices[0].message.content
    assert fake.requests == []
