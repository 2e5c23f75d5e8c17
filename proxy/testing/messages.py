"""Factories for chat messages and Responses items, so tests read like conversations."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str | None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra}


def tool_call(call_id: str, name: str = "read_file",
              arguments: str | Mapping[str, Any] = "{}") -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode()
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def assistant_calls(*calls: str | dict[str, Any], content: str | None = None,
                    **extra: Any) -> dict[str, Any]:
    """An assistant message with tool calls; a bare string is a call id to `read_file`."""
    wire = [tool_call(c) if isinstance(c, str) else c for c in calls]
    return {"role": "assistant", "content": content, "tool_calls": wire, **extra}


def tool_result(call_id: str, text: str = "ok") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def item_user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def item_call(call_id: str, name: str = "read_file", arguments: str = "{}") -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name, "arguments": arguments}


def item_output(call_id: str, output: str = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}
