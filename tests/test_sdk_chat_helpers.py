"""The official client's chat surface beyond `create`, through the proxy: raw and streaming
responses with their headers, the `stream` and `parse` helpers with a pydantic schema, strict
tools, `parallel_tool_calls`, and the usage chunk a client did or did not ask for."""

from __future__ import annotations

import openai
import pydantic
import pytest

from proxy.testing.replies import Reply, call
from tests.harness import counted_proxy  # noqa: F401 - the fixture, as `proxy`


USER = [{"role": "user", "content": "Weather in Paris?"}]
THREAD = {"x-thread-id": "sdk-chat"}


class Weather(pydantic.BaseModel):
    city: str
    celsius: int


WEATHER = Weather(city="Paris", celsius=21)


def test_raw_response_keeps_upstream_headers_and_adds_compaction(client: openai.OpenAI,
                                                                 fake) -> None:
    raw = client.chat.completions.with_raw_response.create(model="gpt-4o", messages=USER,
                                                           extra_headers=THREAD)
    assert raw.headers["x-request-id"].startswith("req_")
    assert raw.request_id == raw.headers["x-request-id"]
    assert raw.headers["openai-processing-ms"] == "1"
    assert raw.headers["x-compaction"] == "none"
    assert int(raw.headers["x-context-tokens"]) > 0
    assert raw.parse().choices[0].message.content


def test_streaming_response_is_relayed_line_by_line(client: openai.OpenAI, fake) -> None:
    fake.script(Reply.text("Sunny and mild."))
    with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=USER, stream=True, extra_headers=THREAD) as response:
        assert response.headers["x-request-id"].startswith("req_")
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert not any('"usage":{' in line for line in lines), "usage nobody asked for is hidden"


async def test_stream_helper_with_a_pydantic_schema(aclient: openai.AsyncOpenAI, fake) -> None:
    fake.script(Reply.text(WEATHER.model_dump_json()))
    async with aclient.chat.completions.stream(model="gpt-4o", messages=USER,
                                               response_format=Weather,
                                               extra_headers=THREAD) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_completion()
    assert kinds[0] == "chunk" and kinds.count("content.done") == 1
    assert final.choices[0].message.parsed == WEATHER
    sent = fake.last("/chat/completions").json
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["strict"] is True
    assert sent["response_format"]["json_schema"]["schema"]["required"] == ["city", "celsius"]


@pytest.mark.parametrize("parse", ["chat", "beta"])
def test_parse_helper_sends_the_schema_intact_and_gets_parsed(client: openai.OpenAI, fake,
                                                             parse: str) -> None:
    fake.script(Reply.text(WEATHER.model_dump_json()))
    owner = client.chat.completions if parse == "chat" else client.beta.chat.completions
    done = owner.parse(model="gpt-4o", messages=USER, response_format=Weather,
                       extra_headers=THREAD)
    assert done.choices[0].message.parsed == WEATHER
    expected = openai.lib._pydantic.to_strict_json_schema(Weather)
    assert fake.last("/chat/completions").json["response_format"]["json_schema"]["schema"] == expected


def test_strict_tools_and_parallel_tool_calls_reach_upstream_as_sent(client: openai.OpenAI,
                                                                      fake) -> None:
    fake.script(Reply.tool_calls(call("get_weather", {"city": "Paris", "celsius": 21})))
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    done = client.chat.completions.parse(model="gpt-4o", messages=USER, tools=[tool],
                                         parallel_tool_calls=False, extra_headers=THREAD)
    called = done.choices[0].message.tool_calls[0]
    assert called.function.parsed_arguments == WEATHER
    sent = fake.last("/chat/completions").json
    assert sent["parallel_tool_calls"] is False
    assert sent["tools"][0]["function"]["strict"] is True
    assert sent["tools"][0]["function"]["parameters"]["additionalProperties"] is False


@pytest.mark.parametrize("asked", [False, True])
async def test_usage_chunk_only_for_a_client_that_asked(aclient: openai.AsyncOpenAI, fake,
                                                        asked: bool) -> None:
    options = {"stream_options": {"include_usage": True}} if asked else {}
    stream = await aclient.chat.completions.create(model="gpt-4o", messages=USER, stream=True,
                                                   extra_headers=THREAD, **options)
    chunks = [chunk async for chunk in stream]
    usage_chunks = [c for c in chunks if c.usage is not None]
    assert len(usage_chunks) == (1 if asked else 0)
    assert all(c.choices for c in chunks if c.usage is None), "no empty chunk left behind"
    assert fake.last("/chat/completions").json["stream_options"] == {"include_usage": True}


def test_a_parsed_answer_echoed_as_the_sdk_dumps_it_keeps_its_anchor(client: openai.OpenAI,
                                                                     proxy, fake) -> None:
    fake.script(Reply.text(WEATHER.model_dump_json()),
                Reply.tool_calls(call("get_weather", {"city": "Paris", "celsius": 21})),
                Reply.text(WEATHER.model_dump_json()))
    tool = openai.pydantic_function_tool(Weather, name="get_weather")
    history: list[dict] = list(USER)
    for _ in range(2):
        done = client.chat.completions.parse(model="gpt-4o", messages=history, tools=[tool],
                                             response_format=Weather, extra_headers=THREAD)
        history += [done.choices[0].message.model_dump(exclude_none=True, warnings=False),
                    {"role": "user", "content": "And tomorrow?"}]
    assert "parsed" in history[1] and "parsed_arguments" in history[3]["tool_calls"][0]["function"]
    history[-1] = {"role": "tool", "tool_call_id": history[3]["tool_calls"][0]["id"],
                   "content": "21"}
    client.chat.completions.parse(model="gpt-4o", messages=history, tools=[tool],
                                  response_format=Weather, extra_headers=THREAD)
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True, True]
