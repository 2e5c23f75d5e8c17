"""The official client's Responses helpers through the proxy: the `stream` helper's events and
final usage, and `parse` with a pydantic `text_format`."""

from __future__ import annotations

import openai
import pydantic

from proxy.testing.replies import Reply

MODEL = "gpt-5-mini"
THREAD = {"x-thread-id": "sdk-responses"}


class Plan(pydantic.BaseModel):
    steps: list[str]
    done: bool


PLAN = Plan(steps=["read", "fix"], done=False)


async def test_stream_helper_events_in_order_with_final_usage(aclient: openai.AsyncOpenAI,
                                                             fake) -> None:
    fake.script(Reply.text("Streaming the answer in pieces."))
    async with aclient.responses.stream(model=MODEL, input="Say something.",
                                        extra_headers=THREAD) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed" and kinds.count("response.completed") == 1
    assert kinds.index("response.output_text.done") < kinds.index("response.completed")
    assert final.output_text == "Streaming the answer in pieces."
    assert final.usage is not None and final.usage.input_tokens > 0
    line = [r for r in fake.requests if r.path.endswith("/responses")][-1]
    assert "stream_options" not in line.json, "a Responses stream has its usage anyway"


def test_parse_with_a_pydantic_text_format(client: openai.OpenAI, fake) -> None:
    fake.script(Reply.text(PLAN.model_dump_json()))
    done = client.responses.parse(model=MODEL, input="Plan it.", text_format=Plan,
                                  extra_headers=THREAD)
    assert done.output_parsed == PLAN
    sent = fake.last("/responses").json["text"]["format"]
    assert sent["type"] == "json_schema" and sent["strict"] is True
    assert sent["schema"] == openai.lib._pydantic.to_strict_json_schema(Plan)



def test_a_parsed_answer_echoed_as_the_sdk_dumps_it_keeps_its_anchor(client: openai.OpenAI,
                                                                     proxy, fake) -> None:
    fake.script(Reply.text(PLAN.model_dump_json()), Reply.text(PLAN.model_dump_json()))
    history: list[dict] = [{"role": "user", "content": "Plan it."}]
    done = client.responses.parse(model=MODEL, input=history, text_format=Plan,
                                  extra_headers=THREAD)
    history += [item.model_dump(exclude_none=True, warnings=False) for item in done.output]
    assert "parsed" in history[-1]["content"][0], "what an SDK user echoes"
    history.append({"role": "user", "content": "Go on."})
    client.responses.parse(model=MODEL, input=history, text_format=Plan, extra_headers=THREAD)
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]


def test_the_beta_responses_surface_goes_through_the_pipeline(client: openai.OpenAI, proxy,
                                                              fake) -> None:
    done = client.beta.responses.create(model=MODEL, input=[{"role": "user", "content": "Hi."}],
                                        extra_headers=THREAD)
    assert done.status == "completed" and done.output[0].content[0].text
    assert fake.last("/responses").query == {"beta": "true"}
    line = proxy.requests()[-1]
    assert line["path"] == "/v1/responses" and line["compaction"] == "none"
