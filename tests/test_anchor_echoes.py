"""Anchors recognise a client's echo of an answer that it re-serialized the way real SDKs do.

SPEC §3: the id of a response's message is computed from what the proxy relayed so that the
client's echo matches. Clients that parse tool-call arguments and write them back (LangChain's
`json.dumps(args)`: spaces, escaped non-ASCII; the AI SDK's compact `JSON.stringify`) send the
same call with other bytes in its `arguments` string.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy.anchors import anchor_for, echoed, response_digests
from proxy.conversation import Api
from proxy.identity import Identities
from proxy.testing.replies import Reply, call
from proxy.usage import Usage
from tests.conftest import API_KEY
from tests.factories import chat, responses
from tests.harness import counted_proxy  # noqa: F401 - the fixture, as `proxy`


IDS = Identities()
ARGUMENTS = '{"path":"src/café.py","lines":[1,20],"opts":{"raw":true}}'


def _respaced(arguments: str) -> str:
    return json.dumps(json.loads(arguments))  # LangChain: ", " and ": ", "\u00e9"


def _anchor(api: Api, projection: list[dict[str, Any]], answer: Any) -> Any:
    entries = chat(*projection) if api is Api.CHAT else responses(*projection)
    digests = response_digests(api, answer, IDS)
    return anchor_for(entries, b"", digests, Usage(1000, 20, visible_output=20)), len(entries)


@pytest.mark.parametrize("relayed, echoed_as", [(ARGUMENTS, _respaced(ARGUMENTS)),
                                                (_respaced(ARGUMENTS), ARGUMENTS)])
def test_chat_echo_with_reserialized_arguments_is_recognised(relayed: str, echoed_as: str) -> None:
    projection = [{"role": "user", "content": "Read the file."}]
    answer = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": relayed}}]}
    anchor, position = _anchor(Api.CHAT, projection, answer)
    echo = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "id": "call_1", "function": {"name": "read", "arguments": echoed_as}}]}
    entries = chat(*projection, echo, {"role": "tool", "tool_call_id": "call_1", "content": "x"})
    assert echoed(entries, anchor, IDS.content_digest) == [position]


def test_responses_echo_with_reserialized_arguments_is_recognised() -> None:
    projection = [{"role": "user", "content": "Read the file."}]
    answer = [{"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read",
               "arguments": ARGUMENTS, "status": "completed"}]
    anchor, position = _anchor(Api.RESPONSES, projection, answer)
    echo = {"type": "function_call", "call_id": "call_1", "name": "read",
            "arguments": _respaced(ARGUMENTS)}
    entries = responses(*projection, echo,
                        {"type": "function_call_output", "call_id": "call_1", "output": "x"})
    assert echoed(entries, anchor, IDS.content_digest) == [position]


def test_different_arguments_are_still_a_different_answer() -> None:
    projection = [{"role": "user", "content": "Read the file."}]
    answer = {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": ARGUMENTS}}]}
    anchor, _ = _anchor(Api.CHAT, projection, answer)
    other = ARGUMENTS.replace("[1,20]", "[1,21]")
    echo = {"role": "assistant", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": other}}]}
    assert echoed(chat(*projection, echo), anchor, IDS.content_digest) is None


def test_langchain_style_echo_uses_the_anchor_end_to_end(proxy, fake) -> None:
    fake.script(Reply.tool_calls(call("read_file", {"path": "src/lexer.py", "limit": 20})),
                Reply.text("Read it."))
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the lexer."}]
    headers = {"authorization": f"Bearer {API_KEY}", "x-thread-id": "langchain"}
    with httpx.Client(base_url=proxy.base_url, headers=headers, timeout=20) as http:
        first = http.post("/chat/completions", json={"model": "gpt-4o", "messages": messages})
        echo = first.json()["choices"][0]["message"]
        for tool_call in echo["tool_calls"]:
            function = tool_call["function"]
            function["arguments"] = _respaced(function["arguments"])
        messages += [echo, {"role": "tool", "tool_call_id": echo["tool_calls"][0]["id"],
                            "content": "def lex(): ..."}]
        assert http.post("/chat/completions",
                         json={"model": "gpt-4o", "messages": messages}).status_code == 200
    assert [line["anchor_used"] for line in proxy.requests()] == [False, True]
