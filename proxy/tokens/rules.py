"""What each piece of a request costs in prompt tokens, given a text counter.

OpenAI's published recipe (PROTOCOL.md §7): every message costs 3 tokens of framing plus its
role, content and name (a name 1 more); the reply is primed with 3; function definitions
follow the cookbook's gpt-4o constants for their properties, and what else their `parameters`
hold (`$defs`, a top-level `anyOf`) counts as its JSON text. Where the recipe is silent the
rules below count what the model reads: each tool call as framing, name and arguments, and a
Responses `*_call` item's other fields (a patch, a hosted tool's output) as their JSON text;
reasoning text sent back (`reasoning_content`, `reasoning`, Responses reasoning summaries and
texts); images by the model's image rule (`images.py`); audio and files by what they are
(`attachments.py`); legacy `functions` by the tool rule and response schemas as their JSON
text; any other content part or item as its JSON text. Everything is a pure function of the
parsed JSON, a `count(text) -> int` and the model's image rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


from proxy import jsonio

from proxy.tokens.attachments import audio_tokens, file_tokens
from proxy.tokens.images import DEFAULT_RULE, ImageRule

Count = Callable[[str], int]

MESSAGE = 3  # <|start|>{role}<|message|> ... <|end|>
NAME = 1
CALL = 3
REPLY_PRIMING = 3
FUNCTION, PROPERTIES, PROPERTY, ENUM, ENUM_ITEM, FUNCTIONS_END = 7, 3, 3, -3, 3, 12

_REASONING_TEXT = ("reasoning_content", "reasoning")

# An `item_reference` stands for an item upstream keeps stored: its content is upstream's and
# its own JSON says nothing of its size. One that echoes an answer the proxy relayed is covered
# by that answer's usage anchor, or counts the size the proxy recorded when it relayed the item
# (`proxy.item_sizes`). For one the proxy never relayed (before a restart, on another instance)
# nothing is known, and `anchors.estimate` guesses: the tenant's largest recorded item, else
# this, for a tenant it knows nothing of. An assumption, not a measurement: agent answer items
# (a tool call, a reply) mostly run from tens to a few hundred tokens, and the guess errs above
# them; a request that guesses alone put over the limit is not refused (`CompactionFlow`).
REFERENCED_ITEM = 1000


def json_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    try:
        return jsonio.dumps_text(value)
    except TypeError:
        return str(value)


def content_tokens(content: Any, count: Count, images: ImageRule = DEFAULT_RULE) -> int:
    """A message's `content` (or an output): a string or a list of parts."""
    if content is None:
        return 0
    if not isinstance(content, list):
        # A computer_call_output's `output` is one part, a screenshot: an image, not its base64.
        if isinstance(content, Mapping) and content.get("type") == "computer_screenshot":
            return part_tokens(content, count, images)
        return count(json_text(content))
    return sum(part_tokens(part, count, images) for part in content)


def part_tokens(part: Any, count: Count, images: ImageRule = DEFAULT_RULE) -> int:
    if not isinstance(part, Mapping):
        return count(json_text(part))
    text = part.get("text")
    if isinstance(text, str):
        return count(text)
    kind = part.get("type")
    if kind == "refusal":
        return count(str(part.get("refusal", "")))
    if kind == "image_url":
        image = part.get("image_url")
        if isinstance(image, Mapping):
            return images.tokens(_str(image.get("url")), _str(image.get("detail")))
        return images.tokens(_str(image), None)
    if kind in _IMAGE_PARTS:
        return images.tokens(_str(part.get("image_url")), _str(part.get("detail")))
    if kind == "input_audio":
        return audio_tokens(part.get("input_audio"))
    if kind == "file":
        return file_tokens(part.get("file"), images)
    if kind == "input_file":
        return file_tokens(part, images)
    return count(json_text({k: v for k, v in part.items() if k != "type"}))


_IMAGE_PARTS = ("input_image", "computer_screenshot")  # an image by its `image_url` string


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def chat_message_tokens(message: Mapping[str, Any], count: Count,
                        images: ImageRule = DEFAULT_RULE) -> int:
    total = (MESSAGE + count(str(message.get("role", "")))
             + content_tokens(message.get("content"), count, images))
    name = message.get("name")
    if name:
        total += NAME + count(str(name))
    reasoning = _reasoning_text(message)
    if reasoning:
        total += count(reasoning)
    refusal = message.get("refusal")
    if isinstance(refusal, str):
        total += count(refusal)
    calls = message.get("tool_calls")
    if isinstance(calls, list):
        total += sum(chat_call_tokens(call, count) for call in calls)
    legacy = message.get("function_call")
    if isinstance(legacy, Mapping):
        # The deprecated single call: the model reads it as it reads one in `tool_calls`.
        total += chat_call_tokens({"function": legacy}, count)
    return total


def _reasoning_text(message: Mapping[str, Any]) -> str:
    """The reasoning a message sends back. Under both names (vLLM renamed `reasoning_content`
    `reasoning` and sent both for a while) it is one text the upstream reads once: the longer."""
    texts = [v for v in map(message.get, _REASONING_TEXT) if isinstance(v, str)]
    return max(texts, key=len) if texts else ""


def chat_call_tokens(call: Any, count: Count) -> int:
    if not isinstance(call, Mapping):
        return 0
    body = call.get("function") or call.get("custom") or {}
    if not isinstance(body, Mapping):
        return CALL + count(json_text(body))
    arguments = body.get("arguments", body.get("input", ""))
    return CALL + count(str(body.get("name", ""))) + count(json_text(arguments))


def responses_item_tokens(item: Mapping[str, Any], count: Count,
                          images: ImageRule = DEFAULT_RULE) -> int:
    kind = item.get("type") or "message"
    if kind == "message":
        role = str(item.get("role", ""))
        return MESSAGE + count(role) + content_tokens(item.get("content"), count, images)
    if kind == "reasoning":
        # The summary, and the reasoning text itself, which vLLM's gpt-oss clients send back
        # and its server renders into the prompt (PROTOCOL.md §4.2's `content`).
        return _texts_tokens(item.get("summary"), count) + _texts_tokens(item.get("content"), count)
    if not isinstance(kind, str):
        return MESSAGE + count(json_text(item))
    if kind.endswith("_call_output"):
        return MESSAGE + content_tokens(item.get("output"), count, images)
    if kind.endswith("_call"):
        arguments = item.get("arguments", item.get("input", item.get("action", "")))
        total = CALL + count(str(item.get("name", ""))) + count(json_text(arguments))
        if item.keys() <= _FUNCTION_CALL:
            return total  # the usual item: nothing else to look for
        return total + _call_fields_tokens(item, count, images)
    return MESSAGE + count(json_text(item))


# What a call item says besides its name and arguments is what the model reads of it too: a
# patch's `operation`, an MCP call's `output`, a code interpreter's `code` and `outputs`, a file
# search's `results`. Only its bookkeeping (and its name, counted on its own) is left out.
_CALL_BOOKKEEPING = frozenset({"type", "id", "call_id", "status", "name"})
_FUNCTION_CALL = _CALL_BOOKKEEPING | {"arguments"}


def _call_fields_tokens(item: Mapping[str, Any], count: Count, images: ImageRule) -> int:
    """A call item's fields beyond its bookkeeping, name and arguments (`arguments`, else
    `input`, else `action`, counted by the caller) as JSON text."""
    given = next((field for field in ("arguments", "input", "action") if field in item), None)
    rest = {k: v for k, v in item.items() if k not in _CALL_BOOKKEEPING and k != given}
    total = 0
    result = rest.get("result")
    if item.get("type") == "image_generation_call" and isinstance(result, str):
        # A generated image (base64, no data URL) costs what the image costs, not its text.
        total += images.tokens(_BASE64_IMAGE + result[:_IMAGE_HEAD], None)
        del rest["result"]
    return total + (count(json_text(rest)) if rest else 0)


_BASE64_IMAGE = "data:image/png;base64,"  # the size is read from the bytes, whatever the type
_IMAGE_HEAD = 87384  # base64 characters: as many as `images.image_size` reads


def _texts_tokens(parts: Any, count: Count) -> int:
    if not isinstance(parts, list):
        return 0
    return sum(count(str(s.get("text", ""))) for s in parts if isinstance(s, Mapping))


def instructions_tokens(instructions: Any, count: Count, images: ImageRule = DEFAULT_RULE) -> int:
    """Responses `instructions`: a system message of its own."""
    if instructions is None or instructions == "":
        return 0
    return MESSAGE + content_tokens(instructions, count, images)


def tools_tokens(tools: Any, count: Count) -> int:
    """Tool definitions: functions by the cookbook rule, other tools as their JSON."""
    if not isinstance(tools, list) or not tools:
        return 0
    return sum(_tool_tokens(tool, count) for tool in tools) + FUNCTIONS_END


def _tool_tokens(tool: Any, count: Count) -> int:
    if not isinstance(tool, Mapping):
        return 0
    function = _function_of(tool)
    if function is None:
        return count(json_text(tool))
    description = str(function.get("description", "")).rstrip(".")
    total = FUNCTION + count(f"{function.get('name', '')}:{description}")
    parameters = function.get("parameters")
    if not isinstance(parameters, Mapping):
        return total + (count(json_text(parameters)) if parameters else 0)
    properties = parameters.get("properties")
    if isinstance(properties, Mapping) and properties:
        total += PROPERTIES + sum(_property_tokens(k, p, count) for k, p in properties.items())
    elif properties:  # not an object of properties: what it is, as text
        total += count(json_text(properties))
    rest = {k: v for k, v in parameters.items() if k not in _RECIPE_PARAMETERS}
    return total + (count(json_text(rest)) if rest else 0)


# What the cookbook's recipe covers of a function's `parameters` (its examples carry `type`,
# `properties` and `required`, and its counts match the API's). The model reads the rest too:
# `$defs` of nested models (pydantic, `openai.pydantic_function_tool`), a top-level `anyOf` or
# `oneOf`, a title or description: counted as their JSON text.
_RECIPE_PARAMETERS = frozenset({"type", "properties", "required"})


def _function_of(tool: Mapping[str, Any]) -> Mapping[str, Any] | None:
    if tool.get("type") != "function":
        return None
    nested = tool.get("function")
    if isinstance(nested, Mapping):
        return nested
    # The Responses API writes function tools flat: {"type": "function", "name": ...}.
    return tool if "name" in tool and nested is None else None


def _property_tokens(key: str, prop: Any, count: Count) -> int:
    prop = prop if isinstance(prop, Mapping) else {}
    total = PROPERTY
    enum = prop.get("enum")
    if isinstance(enum, list):
        total += ENUM + sum(ENUM_ITEM + count(str(item)) for item in enum)
    description = str(prop.get("description", "")).rstrip(".")
    total += count(f"{key}:{prop.get('type', '')}:{description}")
    # Nested schemas (items, properties, defaults) are read by the model too.
    rest = {k: v for k, v in prop.items() if k not in ("type", "description", "enum")}
    return total + (count(json_text(rest)) if rest else 0)


def request_definitions(doc: Mapping[str, Any]) -> tuple[Any, Any] | None:
    """A request's legacy chat `functions` and response schema (chat `response_format`,
    Responses `text.format`), read beside its tools; None without either, the usual case."""
    if _DEFINITION_NAMES.isdisjoint(doc):
        return None  # the usual request: one test in C (a name present as null reads as absent)
    functions = doc.get("functions")
    text = doc.get("text")
    schema = text.get("format") if isinstance(text, Mapping) else doc.get("response_format")
    schema = schema if _is_schema(schema) else None
    return (functions or None, schema) if functions or schema is not None else None


_DEFINITION_NAMES = frozenset({"functions", "text", "response_format"})


def _is_schema(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "json_schema"


def definitions_tokens(definitions: Any, count: Count) -> int:
    """`functions` by the tool rule (each a bare function definition); a response schema as the
    JSON text the model is given."""
    if not isinstance(definitions, (tuple, list)) or len(definitions) != 2:
        return 0
    functions, schema = definitions
    total = 0
    if isinstance(functions, list) and functions:
        total += tools_tokens([{"type": "function", "function": f} for f in functions], count)
    if schema is not None:
        total += count(json_text(schema))
    return total
