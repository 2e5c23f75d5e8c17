"""The usage chunk the proxy asked for on a client's behalf, in the shapes servers send it:
`choices: []` as OpenAI does, `choices` left out or null (Fireworks and other servers do, when
`include_usage` is set). A client that did not ask never sees it (SPEC §6): a naive one reads
`chunk.choices[0]` of every chunk."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.test_server_wire_edges import make_upstream  # noqa: F401 - the fixture
from tests.test_stream_usage_capture import ANSWER, DONE, USAGE, USER, _sending

_HEAD = {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "gpt-4o"}


def _usage_chunk(choices: Any) -> bytes:
    body = {**_HEAD, "usage": USAGE} if choices == "absent" else \
        {**_HEAD, "choices": choices, "usage": USAGE}
    return b"data: " + json.dumps(body).encode() + b"\n\n"


@pytest.mark.parametrize("choices", [[], None, "absent"], ids=["empty", "null", "absent"])
def test_a_usage_chunk_the_client_did_not_ask_for_is_hidden_in_any_shape(  # noqa: F811
        make_upstream, make_proxy, choices: Any) -> None:
    proxy = make_proxy(make_upstream(_sending(ANSWER + _usage_chunk(choices) + DONE)).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    chunks = list(client.chat.completions.create(model="gpt-4o", messages=USER, stream=True))
    client.close()
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello"
    assert all(c.usage is None for c in chunks)
    line = proxy.requests()[-1]
    assert line["usage_chunk_hidden"] is True and line["usage_input"] == 11


@pytest.mark.parametrize("choices", [[], None, "absent"], ids=["empty", "null", "absent"])
def test_a_client_that_asked_for_usage_gets_the_chunk_as_sent(make_upstream,  # noqa: F811
                                                              make_proxy, choices: Any) -> None:
    sent = ANSWER + _usage_chunk(choices) + DONE
    proxy = make_proxy(make_upstream(_sending(sent)).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    with client.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=USER, stream=True,
            stream_options={"include_usage": True}) as raw:
        received = b"".join(raw.iter_bytes())
    client.close()
    assert received == sent
    assert proxy.requests()[-1]["usage_input"] == 11


@pytest.mark.parametrize("every", [False, True], ids=["on_the_last", "on_every"])
def test_usage_beside_choices_is_read_and_not_shown_to_a_client_that_did_not_ask(  # noqa: F811
        make_upstream, make_proxy, every: bool) -> None:
    def chunk(delta: dict[str, Any], finish: str | None, usage: Any) -> bytes:
        body = {**_HEAD, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "usage": usage}
        return b"data: " + json.dumps(body).encode() + b"\n\n"

    sent = (chunk({"role": "assistant", "content": "Hel"}, None, USAGE if every else None)
            + chunk({"content": "lo"}, "stop", USAGE) + DONE)
    proxy = make_proxy(make_upstream(_sending(sent)).url, tokens=COUNTED)
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    messages: list[Any] = list(USER)
    for _ in range(2):
        chunks = list(client.chat.completions.create(model="gpt-4o", messages=messages,
                                                     stream=True,
                                                     extra_headers={"x-thread-id": "t"}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == "Hello"
        assert all(c.usage is None for c in chunks)
        messages += [{"role": "assistant", "content": "Hello"}, {"role": "user", "content": "on"}]
    client.close()
    first, second = proxy.requests()
    assert first["usage_input"] == 11 and second["anchor_used"] is True
