"""A request's prompt as units (tools, instructions, each message or item) with their token counts.

The units serve twice: their sum is the prompt's reference token count (exactly what
`reference_tokens.chat_prompt_tokens` / `responses_prompt_tokens` say), and their chained digests
are the prefixes of the simulated prompt cache. Counts are cached by the digest of each unit's
canonical JSON (and the model's media costs, which a message's count depends on), so a long
conversation costs tokenizing only its new messages, which keeps the fake from being the
bottleneck of a benchmark. Legacy `functions` and a response schema are one unit, beside tools.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from proxy import jsonio
from proxy.lru import LRU
from proxy.testing.reference_media import image_cost
from proxy.testing.reference_tokens import (
    REPLY_PRIMING,
    TOKENS_PER_MESSAGE,
    chat_message_tokens,
    count_text,
    definitions_tokens,
    responses_item_tokens,
    tools_tokens,
)

Unit = tuple[bytes, int]  # (digest, tokens)


def prompt_tokens(units: Sequence[Unit]) -> int:
    return REPLY_PRIMING + sum(tokens for _, tokens in units)


def truncated_front(units: Sequence[Unit], keep: int, limit: int) -> list[Unit]:
    """Responses `truncation: "auto"`: drop units after the first `keep` (instructions, tools),
    oldest first, until the prompt fits `limit`; the newest unit is never dropped, so what
    still does not fit overflows as with truncation disabled."""
    kept = list(units)
    while prompt_tokens(kept) > limit and len(kept) > keep + 1:
        del kept[keep]
    return kept


class PromptUnits:
    def __init__(self, max_entries: int = 200_000) -> None:
        self._tokens: LRU[bytes, int] = LRU(max_entries)

    def chat(self, body: Mapping[str, Any]) -> list[Unit]:
        model = str(body.get("model", ""))
        messages = [m for m in body.get("messages") or () if isinstance(m, Mapping)]
        return self._tools(body) + [self._unit(b"message", m, chat_message_tokens, model)
                                    for m in messages]

    def responses(self, body: Mapping[str, Any], prior: Sequence[Any]) -> list[Unit]:
        return self.responses_head(body) + self.responses_items(body, prior)

    def responses_head(self, body: Mapping[str, Any]) -> list[Unit]:
        """The units before the conversation: instructions and tools."""
        units: list[Unit] = []
        if isinstance(body.get("instructions"), str):
            units.append(self._unit(b"text", body["instructions"], _text_message_tokens))
        return units + self._tools(body)

    def responses_items(self, body: Mapping[str, Any], prior: Sequence[Any]) -> list[Unit]:
        model = str(body.get("model", ""))
        units = [self._unit(b"item", i, responses_item_tokens, model)
                 for i in prior if isinstance(i, Mapping)]
        current = body.get("input")
        if isinstance(current, str):
            return units + [self._unit(b"text", current, _text_message_tokens)]
        items = [i for i in current if isinstance(i, Mapping)] if isinstance(current, list) else []
        return units + [self._unit(b"item", i, responses_item_tokens, model) for i in items]

    def _tools(self, body: Mapping[str, Any]) -> list[Unit]:
        tools = body.get("tools")
        units = [self._unit(b"tools", tools, tools_tokens)] if tools else []
        definitions = {k: body[k] for k in _DEFINITIONS if k in body}
        if definitions:
            units.append(self._unit(b"definitions", definitions, definitions_tokens))
        return units

    def _unit(self, kind: bytes, value: Any, count: Callable[..., int],
              model: str | None = None) -> Unit:
        digest = hashlib.blake2b(kind + jsonio.dumps(value, sort_keys=True),
                                 digest_size=16).digest()
        # A message's count depends on the model's media costs; its cache prefix does not.
        key = digest if model is None else digest + repr(image_cost(model)).encode()
        tokens = self._tokens.get(key)
        if tokens is None:
            tokens = count(value) if model is None else count(value, model)
            self._tokens.put(key, tokens)
        return digest, tokens


_DEFINITIONS = ("functions", "response_format", "text")


def _text_message_tokens(text: str) -> int:
    return TOKENS_PER_MESSAGE + count_text(text)
