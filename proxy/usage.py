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
from types import MappingProxyType
from typing import Any

from proxy.conversation import Api
from proxy.conversation import RESPONSES as _RESPONSES

Count = Callable[[str], int]


# Not frozen: one is built for every answer and dropped with it, and a frozen
# `__init__` sets each field through `object.__setattr__`. Never mutated all the same.
@dataclass(slots=True)
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
    if type(usage) is not dict and not isinstance(usage, Mapping):  # a dict: skip the ABC check
        return None
    get = usage.get
    # The OpenAI shape, counts as parsed JSON has them, is read inline: the calls below give
    # the same answer for it, and handle every other shape.
    prompt = get("prompt_tokens")
    input_tokens = prompt if type(prompt) is int and prompt >= 0 else _input(usage)
    if input_tokens is None:
        return None
    completion = get("completion_tokens")
    output = (completion if type(completion) is int and completion >= 0 else
              _first(completion, get("output_tokens"), get("eval_count")) or 0)
    if _BREAKDOWN_NAMES.isdisjoint(usage):  # the set's method: no `keys()` call to make
        reasoning, cached, cache_write = None, 0, 0  # a bare count: nothing more to look up
    else:
        reasoning, cached, cache_write = _breakdown(usage)
    if reasoning is not None:
        reasoning = min(reasoning, output)
        return Usage(input_tokens, output, cached, cache_write, reasoning, output - reasoning)
    # A chat message with none of the reasoning fields (most answers): nothing to estimate.
    if (type(response) is dict and api != _RESPONSES
            and _REASONING_NAMES.isdisjoint(response)):
        return Usage(input_tokens, output, cached, cache_write, 0, output)
    reasoning = min(_estimate(api, response, count), output)
    return Usage(input_tokens, output, cached, cache_write, reasoning, output - reasoning,
                 reasoning > 0)


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


# Every name `_breakdown` reads at the top level.
_BREAKDOWN_NAMES = frozenset({
    "prompt_tokens_details", "input_tokens_details", "completion_tokens_details",
    "output_tokens_details", "reasoning_tokens", "cache_read_input_tokens",
    "prompt_cache_hit_tokens", "cache_creation_input_tokens", "cache_write_tokens"})


def _breakdown(usage: Mapping[str, Any]) -> tuple[int | None, int, int]:
    """Reasoning (None when not reported), cached and cache-write tokens.

    Each provider's names are looked up directly (a nested details object once), in the
    order of preference: the first valid count wins."""
    get = usage.get
    prompt_details = _details(get("prompt_tokens_details"))
    input_details = _details(get("input_tokens_details"))
    completion_details = _details(get("completion_tokens_details"))
    output_details = _details(get("output_tokens_details"))
    reasoning = _first(completion_details.get("reasoning_tokens"),
                       output_details.get("reasoning_tokens"), get("reasoning_tokens"))
    cached = _first(prompt_details.get("cached_tokens"), input_details.get("cached_tokens"),
                    get("cache_read_input_tokens"), get("prompt_cache_hit_tokens")) or 0
    cache_write = _first(prompt_details.get("cache_write_tokens"),
                         input_details.get("cache_write_tokens"),
                         prompt_details.get("cache_creation_tokens"),
                         get("cache_creation_input_tokens"), get("cache_write_tokens")) or 0
    return reasoning, cached, cache_write


_NO_DETAILS: Mapping[str, Any] = MappingProxyType({})


def _details(value: Any) -> Mapping[str, Any]:
    """A nested `*_tokens_details` object; an empty one when absent or not an object."""
    # Parsed JSON is dicts: that check first, the slow ABC one only for other mappings.
    if type(value) is dict or (value is not None and isinstance(value, Mapping)):
        return value
    return _NO_DETAILS


def _first(*values: Any) -> int | None:
    """The first of `values` that is a valid count."""
    for value in values:
        if value is not None:  # most names are absent: skip the call for them
            found = _int(value)
            if found is not None:
                return found
    return None


def _int(value: Any) -> int | None:
    if type(value) is int:  # what parsed JSON has: the checks below are for anything else
        return value if value >= 0 else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None  # a count is whole: a fraction is no count of anything
    return int(value) if value >= 0 else None


# The largest context windows on offer hold some 10 million tokens: no model without a profile
# can have read more. With a profile, twice its window: a provider refuses a request above its
# window, and the factor leaves room for a profile set too small.
UNPROFILED_CEILING = 10_000_000
CEILING_FACTOR = 2


def usage_ceiling(window: int | None) -> int:
    """The most tokens a count of usage can plausibly say, for a model of `window` tokens of
    input (None: no profile says it)."""
    return UNPROFILED_CEILING if window is None else CEILING_FACTOR * window


def plausible_usage(usage: Usage, ceiling: int) -> bool:
    """Whether no count of `usage` is above `ceiling` (`usage_ceiling`). An implausible one
    (1e23 tokens, as some servers report) must not anchor the next estimate: that request would
    look far over its window, and fail or compact for nothing."""
    return (usage.input + usage.output <= ceiling
            and max(usage.cached, usage.cache_write) <= ceiling)


def _estimate(api: Api | str, response: Any, count: Count | None) -> int:
    if count is None or response is None:
        return 0
    texts = reasoning_texts(api, response)
    return sum(map(count, texts)) if texts else 0  # most answers carry none


_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_details", "thinking_blocks")
_REASONING_NAMES = frozenset(_REASONING_KEYS)


def reasoning_texts(api: Api | str, response: Any) -> list[str]:
    """The reasoning text a response carried: a chat message's or Responses reasoning items'."""
    if api == _RESPONSES:
        items = response if isinstance(response, Sequence) and not isinstance(response, str) else ()
        return [t for item in items if isinstance(item, Mapping) for t in _item_reasoning(item)]
    if type(response) is not dict and not isinstance(response, Mapping):
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
