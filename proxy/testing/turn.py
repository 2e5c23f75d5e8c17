"""One answer of the fake model, ready to render: the reply, ids, counts and the request's options.

Both renderers (chat and Responses) read a `Turn`; building it is where the reply's tool calls
get their ids and the completion tokens are counted, so a streamed and a non-streamed answer to
the same request carry the same ids and usage.
"""

from __future__ import annotations

import dataclasses
import random
import string
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from proxy.testing.reference_tokens import TOKENS_PER_CALL, count_text, token_prefix
from proxy.testing.replies import Reply
from proxy.testing.usage import Counts

_ALNUM = string.ascii_letters + string.digits


class Ids:
    """Deterministic ids and padding (seeded), so runs and their prompt caches are reproducible."""

    def __init__(self, seed: int = 0) -> None:
        self._rng = random.Random(seed)

    def hex(self, n: int) -> str:
        return "".join(self._rng.choice("0123456789abcdef") for _ in range(n))

    def alnum(self, n: int) -> str:
        return "".join(self._rng.choice(_ALNUM) for _ in range(n))

    def bytes(self, n: int) -> bytes:
        return self._rng.randbytes(n)

    def padding(self) -> str:
        return self.alnum(self._rng.randint(2, 12))


@dataclass(frozen=True)
class Turn:
    model: str
    reply: Reply
    counts: Counts
    call_ids: tuple[str, ...]
    created: int
    dialect: str = "openai"
    usage_style: str = "openai"
    include_usage: bool = False
    obfuscate: bool = True
    # The other choices a request's `n` asked for: each with its own reply and call ids.
    # `counts` (of this turn, the first choice) covers them all, as upstream's usage does.
    more: tuple[Turn, ...] = ()

    def samples(self) -> tuple[Turn, ...]:
        """Every choice of the answer, by index."""
        return (self, *self.more)


def completion_tokens(reply: Reply) -> tuple[int, int]:
    """(completion tokens including reasoning, reasoning tokens) of a reply."""
    reasoning = count_text(reply.reasoning) if reply.reasoning else 0
    total = reasoning + (count_text(reply.content) if reply.content else 0)
    for call in reply.calls:
        total += TOKENS_PER_CALL + count_text(call.name) + count_text(call.arguments)
    return total, reasoning


def capped(reply: Reply, limit: int) -> Reply:
    """`reply` as a model stops it at `limit` output tokens (`max_completion_tokens`,
    `max_tokens`, `max_output_tokens`): the reasoning first, then the text, then the calls,
    each as far as the tokens left reach (a call cut short keeps the start of its arguments,
    which are then no JSON), ending with `finish_reason: length`. As it is when it fits, when
    `limit` is 0 (none asked), or when the reply `ignores_cap`."""
    if limit <= 0 or reply.ignores_cap or completion_tokens(reply)[0] <= limit:
        return reply
    reasoning, left = _cut(reply.reasoning, limit)
    content, left = _cut(reply.content, left)
    calls = []
    for call in reply.calls:
        header = TOKENS_PER_CALL + count_text(call.name)
        if left <= header:
            break
        arguments, left = _cut(call.arguments, left - header)
        calls.append(dataclasses.replace(call, arguments=arguments or ""))
    return dataclasses.replace(reply, reasoning=reasoning, content=content, calls=tuple(calls),
                               finish_reason="length")


def _cut(text: str | None, left: int) -> tuple[str | None, int]:
    """`text` as far as `left` tokens reach (None when none do), and the tokens left after."""
    if not text:
        return text, left
    kept, used = token_prefix(text, left)
    return kept or None, left - used


def sampled(reply: Reply, index: int) -> Reply:
    """Choice `index` (from 1) of `n`: the scripted reply told apart by its text, its calls
    the same but given ids of their own, as independent samples of a model would be."""
    content = reply.content
    if content or not reply.calls:
        content = f"{content or ''} (sample {index + 1})".lstrip()
    calls = tuple(dataclasses.replace(call, id=None) for call in reply.calls)
    return dataclasses.replace(reply, content=content, calls=calls)


def call_ids(reply: Reply, ids: Ids, dialect: str) -> tuple[str, ...]:
    return tuple(call.id or _fresh_call_id(ids, dialect) for call in reply.calls)


def _fresh_call_id(ids: Ids, dialect: str) -> str:
    # Mistral's ids are 9 alphanumerics [SRC mistral-common validator: `^[a-zA-Z0-9]{9}$`];
    # vLLM `chatcmpl-tool-<hex>` [OBS];
    # OpenAI `call_` + 24.
    if dialect == "vllm":
        return "chatcmpl-tool-" + ids.hex(32)
    return ids.alnum(9) if dialect == "mistral" else "call_" + ids.alnum(24)


def stream_options(body: Mapping[str, Any]) -> tuple[bool, bool]:
    """(include_usage, include_obfuscation) as the request asked."""
    options = body.get("stream_options")
    options = options if isinstance(options, Mapping) else {}
    return bool(options.get("include_usage")), options.get("include_obfuscation") is not False


def split_text(text: str, size: int = 12) -> list[str]:
    """Stream pieces: about `size` characters each, never empty."""
    return [text[k:k + size] for k in range(0, len(text), size)] or [""]


def split_json(text: str, size: int = 7) -> list[str]:
    """Argument fragments, cut mid-JSON (inside strings and keys) like a real model's output."""
    if len(text) <= 1:
        return [text]
    size = max(1, min(size, len(text) // 2))
    return [text[k:k + size] for k in range(0, len(text), size)]
