"""The usage the fake reports: token counts, a simulated prompt cache, and provider shapes.

Prompt caching is simulated like OpenAI's automatic cache: a request's cached tokens are the
longest prefix, in whole messages or items, that it shares with an earlier request of the same
model and credential, rounded down to a multiple of 128 and counted only from 1024 tokens on
("prompts containing 1024 tokens or more, with cache hits occurring in increments of 128 tokens",
OpenAI cookbook Prompt Caching 201 [DOC]). So a benchmark can measure how cache-friendly a
proxy's projections are. Shapes per `usage_style`: PROTOCOL.md §5.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from proxy.lru import LRU
from proxy.testing.prompt_units import Unit

USAGE_STYLES = ("openai", "anthropic-litellm", "anthropic-native", "deepseek", "openrouter")
CACHE_BLOCK = 128
CACHE_MINIMUM = 1024


@dataclass(frozen=True)
class Counts:
    prompt: int
    completion: int
    reasoning: int = 0
    cached: int = 0
    cache_write: int = 0

    @property
    def total(self) -> int:
        return self.prompt + self.completion


def _cacheable(tokens: int) -> int:
    rounded = tokens - tokens % CACHE_BLOCK
    return rounded if rounded >= CACHE_MINIMUM else 0


class PromptCache:
    """Prefixes seen per model, as chained digests of their units (message or item)."""

    def __init__(self, max_entries: int = 500_000) -> None:
        self._seen: LRU[bytes, bool] = LRU(max_entries)

    def lookup(self, model: str, units: Iterable[Unit], scope: str = "") -> tuple[int, int]:
        """(cached, written) tokens for a prompt made of `units` (digest, tokens); remembers it.
        `scope` is whose cache it is: a provider shares none across organizations (Azure:
        "Prompt caches aren't shared between Azure subscriptions" [DOC])."""
        seed = hashlib.blake2b(model.encode(), digest_size=16).digest()
        chain = hashlib.blake2b(seed + scope.encode(), digest_size=16).digest()
        total, shared, sharing = 0, 0, True
        for digest, tokens in units:
            chain = hashlib.blake2b(chain + digest, digest_size=16).digest()
            total += tokens
            if sharing and self._seen.get(chain):
                shared = total
            else:
                sharing = False
            self._seen.put(chain, True)
        cached = _cacheable(shared)
        return cached, max(0, _cacheable(total) - cached)


def chat_usage(counts: Counts, style: str) -> dict[str, Any]:
    if style == "anthropic-native":
        # Anthropic's counters are additive: input_tokens is the uncached part only.
        return {"input_tokens": counts.prompt - counts.cached - counts.cache_write,
                "output_tokens": counts.completion,
                "cache_read_input_tokens": counts.cached,
                "cache_creation_input_tokens": counts.cache_write}
    usage: dict[str, Any] = {"prompt_tokens": counts.prompt, "completion_tokens": counts.completion,
                             "total_tokens": counts.total}
    completion_details = {"reasoning_tokens": counts.reasoning, "audio_tokens": 0,
                          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
    prompt_details: dict[str, Any] = {"cached_tokens": counts.cached, "audio_tokens": 0}
    if style == "anthropic-litellm":
        prompt_details = {"cached_tokens": counts.cached, "cache_creation_tokens": counts.cache_write}
        usage["cache_read_input_tokens"] = counts.cached
        usage["cache_creation_input_tokens"] = counts.cache_write
    elif style == "deepseek":
        usage["prompt_cache_hit_tokens"] = counts.cached
        usage["prompt_cache_miss_tokens"] = counts.prompt - counts.cached
        prompt_details = {"cached_tokens": counts.cached}
        completion_details = {"reasoning_tokens": counts.reasoning}
    elif style == "openrouter":
        prompt_details["cache_write_tokens"] = counts.cache_write
        usage["cost"] = round(counts.prompt * 1e-6 + counts.completion * 4e-6, 8)
        usage["cost_details"] = {"upstream_inference_cost": None}
        completion_details = {"reasoning_tokens": counts.reasoning}
    usage["prompt_tokens_details"] = prompt_details
    usage["completion_tokens_details"] = completion_details
    return usage


def responses_usage(counts: Counts) -> dict[str, Any]:
    return {"input_tokens": counts.prompt,
            "input_tokens_details": {"cached_tokens": counts.cached,
                                     "cache_write_tokens": counts.cache_write},
            "output_tokens": counts.completion,
            "output_tokens_details": {"reasoning_tokens": counts.reasoning},
            "total_tokens": counts.total}
