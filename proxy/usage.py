"""Reading the usage upstream reports, whatever its shape, into one `Usage` (PROTOCOL.md §5).

Input follows one rule: `prompt_tokens` when present (the OpenAI family, where cached tokens
are a subset and gateways such as LiteLLM have already folded Anthropic's cache counters in);
otherwise `input_tokens` plus Anthropic's additive `cache_read_input_tokens` and
`cache_creation_input_tokens` (a Responses usage has neither, so it is just `input_tokens`);
otherwise DeepSeek's hit + miss. Reasoning tokens are subtracted from output because they do
not come back as context; when a provider gives no breakdown they are estimated from the
reasoning text of the response, with the count function passed in.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.conversation import Api

Count = Callable[[str], int]


@dataclass(frozen=True, slots=True)
class Usage:
    input: int
    output: int
    cached: int = 0
    cache_write: int = 0
    reasoning: int = 0
    visible_output: int = 0
    reasoning_estimated: bool = False

    @property
    def total(self) -> int:
        return self.input + self.output


def normalize(usage: Any, api: Api | str = Api.CHAT, response: Any = None,
              count: Count | None = None) -> Usage | None:
    """`usage` as upstream sent it; `response` is the chat message or the Responses output items."""
    if not isinstance(usage, Mapping):
        return None
    input_tokens = _input(usage)
    if input_tokens is None:
        return None
    output = _first(usage, ("completion_tokens",), ("output_tokens",), ("eval_count",)) or 0
    reasoning = _first(usage, ("completion_tokens_details", "reasoning_tokens"),
                       ("output_tokens_details", "reasoning_tokens"), ("reasoning_tokens",))
    estimated = reasoning is None
    if reasoning is None:
        reasoning = _estimate(api, response, count)
    reasoning = min(reasoning, output)
    return Usage(input_tokens, output, _cached(usage), _cache_write(usage), reasoning,
                 output - reasoning, estimated and reasoning > 0)


def _input(usage: Mapping[str, Any]) -> int | None:
    prompt = _int(usage.get("prompt_tokens"))
    if prompt is not None:
        return prompt
    native = _int(usage.get("input_tokens"))
    if native is not None:
        read = _int(usage.get("cache_read_input_tokens")) or 0
        creation = _int(usage.get("cache_creation_input_tokens")) or 0
        return native + read + creation
    hit, miss = _int(usage.get("prompt_cache_hit_tokens")), _int(usage.get("prompt_cache_miss_tokens"))
    if hit is not None and miss is not None:
        return hit + miss
    return _int(usage.get("prompt_eval_count"))


def _cached(usage: Mapping[str, Any]) -> int:
    return _first(usage, ("prompt_tokens_details", "cached_tokens"),
                  ("input_tokens_details", "cached_tokens"), ("cache_read_input_tokens",),
                  ("prompt_cache_hit_tokens",)) or 0


def _cache_write(usage: Mapping[str, Any]) -> int:
    return _first(usage, ("prompt_tokens_details", "cache_write_tokens"),
                  ("input_tokens_details", "cache_write_tokens"),
                  ("prompt_tokens_details", "cache_creation_tokens"),
                  ("cache_creation_input_tokens",), ("cache_write_tokens",)) or 0


def _first(usage: Mapping[str, Any], *paths: tuple[str, ...]) -> int | None:
    for path in paths:
        value: Any = usage
        for key in path:
            # Parsed JSON is dicts: that check first, the slow ABC one only for other mappings.
            if type(value) is dict or (value is not None and isinstance(value, Mapping)):
                value = value.get(key)
            else:
                value = None
                break
        if value is not None:  # most paths are absent: skip the call for them
            found = _int(value)
            if found is not None:
                return found
    return None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return int(value) if value >= 0 else None


def _estimate(api: Api | str, response: Any, count: Count | None) -> int:
    if count is None or response is None:
        return 0
    return sum(count(text) for text in reasoning_texts(api, response))


_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks")


def reasoning_texts(api: Api | str, response: Any) -> list[str]:
    """The reasoning text a response carried: a chat message's or Responses reasoning items'."""
    if api == Api.RESPONSES:
        items = response if isinstance(response, Sequence) and not isinstance(response, str) else ()
        return [t for item in items if isinstance(item, Mapping) for t in _item_reasoning(item)]
    if not isinstance(response, Mapping):
        return []
    if response.keys().isdisjoint(_REASONING_KEYS):
        return []  # most answers carry none: skip building the candidates
    # Providers send the same reasoning under several names: count the fullest one only.
    candidates = [_str(response.get("reasoning_content")), _str(response.get("reasoning")),
                  "".join(_details_text(response.get("reasoning_details"))),
                  "".join(_thinking_text(response.get("thinking_blocks")))]
    longest = max(candidates, key=len)
    return [longest] if longest else []


def _item_reasoning(item: Mapping[str, Any]) -> list[str]:
    if item.get("type") != "reasoning":
        return []
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key)
        if isinstance(parts, list):
            texts += [p["text"] for p in parts if isinstance(p, Mapping) and isinstance(p.get("text"), str)]
    return texts


def _details_text(details: Any) -> list[str]:
    if not isinstance(details, list):
        return []
    texts = []
    for detail in details:
        if isinstance(detail, Mapping):
            texts.append(_str(detail.get("text")) or _str(detail.get("summary")))
    return texts


def _thinking_text(blocks: Any) -> list[str]:
    if not isinstance(blocks, list):
        return []
    return [_str(b.get("thinking")) for b in blocks if isinstance(b, Mapping)]


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
