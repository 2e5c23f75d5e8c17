"""Valid JSON the proxy must carry whatever its shape: nested as deep as the parser reads,
a chat `role` that is an object or a list, a nested copy of the list's key."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from proxy import jsonio
from proxy.conversation import Api, Kind, entry_from_chat
from proxy.inbound import parse_inbound, with_entries

USER = {"role": "user", "content": "Say hello."}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [300, 990, 1020])
def test_a_value_as_deep_as_the_parser_reads_is_written_again(depth: int) -> None:
    value = jsonio.loads(_nested(depth))
    assert jsonio.dumps(value) == _nested(depth).encode()
    assert jsonio.dumps({"a": value}, sort_keys=True) == b'{"a":' + _nested(depth).encode() + b"}"


@pytest.mark.parametrize(("path", "key"), [("chat/completions", "messages"), ("responses", "input")])
@pytest.mark.parametrize("thread", [{}, {"x-thread-id": "deep"}])
def test_content_nested_990_levels_goes_upstream_as_sent(proxy, fake, path: str, key: str,
                                                         thread: dict[str, str]) -> None:
    body = ('{"model":"gpt-4o","%s":[{"role":"user","content":%s}]}'
            % (key, _nested(990))).encode()
    answer = httpx.post(f"{proxy.base_url}/{path}", content=body, timeout=30,
                        headers={"content-type": "application/json", **thread})
    assert not proxy.logs.events("unhandled_error")
    # The fake judges the content (not a valid message part): what matters is that it got it.
    assert answer.status_code < 500, answer.text
    assert fake.last().body == body


@pytest.mark.parametrize("role", [{"a": 1}, [], ["system"], 3, None])
def test_a_chat_role_of_any_json_type_is_an_other_entry(role: Any) -> None:
    entry = entry_from_chat({"role": role, "content": "x"})
    assert entry.kind is Kind.OTHER
    assert entry.role is None


def test_a_chat_message_whose_role_is_an_object_goes_upstream_as_sent(proxy, fake) -> None:
    messages = [USER, {"role": {"name": "assistant"}, "content": "x"}, USER]
    body = json.dumps({"model": "gpt-4o", "messages": messages}).encode()
    for _ in range(2):  # the second parses as a delta of the first
        answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                            headers={"content-type": "application/json", "x-thread-id": "r"})
        assert not proxy.logs.events("unhandled_error")
        assert answer.status_code < 500, answer.text
        assert fake.last().body == body


@pytest.mark.parametrize("api", [Api.CHAT, Api.RESPONSES])
@pytest.mark.parametrize("nested_first", [True, False])
def test_the_list_is_located_at_the_top_level_not_in_a_nested_copy(api: Api,
                                                                  nested_first: bool) -> None:
    key = "messages" if api is Api.CHAT else "input"
    spaced = json.dumps([USER])  # the client's style: spaces, not what orjson writes
    nested = '"metadata":{"%s":%s}' % (key, json.dumps([USER], separators=(",", ":")))
    fields = [nested, f'"model":"m","{key}":{spaced}']
    body = ("{" + ",".join(fields if nested_first else fields[::-1]) + "}").encode()
    inbound = with_entries(parse_inbound(api, body))
    assert inbound.spans is not None
    assert body[inbound.spans.start:inbound.spans.end] == spaced.encode()


def test_a_stream_whose_options_are_extended_keeps_a_nested_copy_of_the_list(proxy, fake) -> None:
    # `stream_options` present: the proxy rewrites the top-level fields around the list.
    nested = {"messages": [USER]}
    body = ('{"metadata":%s,"model":"gpt-4o","stream":true,"stream_options":{},'
            '"messages":%s}' % (json.dumps(nested, separators=(",", ":")),
                                json.dumps([USER]))).encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                      headers={"content-type": "application/json"}) as answer:
        answer.read()
    assert answer.status_code == 200
    sent = fake.last().json
    assert sent["metadata"] == nested
    assert sent["messages"] == [USER]


def test_a_stream_whose_options_are_extended_keeps_a_field_nested_990_levels(proxy, fake) -> None:
    body = ('{"model":"gpt-4o","stream":true,"stream_options":{},"metadata":{"x":%s},'
            '"messages":[{"role":"user","content":"hi"}]}' % _nested(990)).encode()
    with httpx.stream("POST", f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                      headers={"content-type": "application/json"}) as answer:
        answer.read()
    assert not proxy.logs.events("unhandled_error")
    assert answer.status_code == 200
    assert jsonio.dumps(fake.last().json["metadata"]) == ('{"x":%s}' % _nested(990)).encode()
