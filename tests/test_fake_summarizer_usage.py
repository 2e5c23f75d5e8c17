"""The fake summarizer's shaped answers report usage as their API does (PROTOCOL.md §5): over
Responses all five fields the SDK types as required, the details included; over chat the three
required counts, the total their sum."""

from __future__ import annotations

import pytest

from proxy.testing.summarizer import SIGNATURE, shaped

_RESPONSES_SHAPES = ("refusal", "content_filter", "tool_call", "reasoning_only", "no_output",
                     "unfinished", "failed_invalid_prompt")
_CHAT_SHAPES = ("refusal", "content_filter", "tool_call", "reasoning_only", "no_output")


@pytest.mark.parametrize("shape", _RESPONSES_SHAPES)
def test_a_responses_shape_reports_the_full_usage(shape: str) -> None:
    body = shaped(shape, {"model": "m", "instructions": SIGNATURE, "input": "x"}, "summary").body
    usage = body["usage"]
    assert set(usage) == {"input_tokens", "input_tokens_details", "output_tokens",
                          "output_tokens_details", "total_tokens"}
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_tokens_details"]["cached_tokens"] <= usage["input_tokens"]
    assert usage["output_tokens_details"]["reasoning_tokens"] <= usage["output_tokens"]


@pytest.mark.parametrize("shape", _CHAT_SHAPES)
def test_a_chat_shape_reports_the_required_counts(shape: str) -> None:
    body = shaped(shape, {"model": "m", "messages": [{"role": "system", "content": SIGNATURE}]},
                  "summary").body
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
