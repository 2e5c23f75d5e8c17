"""Usage shapes of every provider normalize to one `Usage` (PROTOCOL.md §5)."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.conversation import Api
from proxy.usage import Usage, normalize, reasoning_texts


def words(text: str) -> int:
    return len(text.split())


def test_openai_chat_usage_keeps_cached_as_a_subset() -> None:
    usage = {"prompt_tokens": 194, "completion_tokens": 20, "total_tokens": 214,
             "prompt_tokens_details": {"cached_tokens": 128, "cache_write_tokens": 6},
             "completion_tokens_details": {"reasoning_tokens": 8}}
    assert normalize(usage, Api.CHAT) == Usage(194, 20, cached=128, cache_write=6, reasoning=8,
                                               visible_output=12)


def test_responses_usage() -> None:
    usage = {"input_tokens": 37, "input_tokens_details": {"cached_tokens": 5},
             "output_tokens": 11, "output_tokens_details": {"reasoning_tokens": 4}, "total_tokens": 48}
    assert normalize(usage, Api.RESPONSES) == Usage(37, 11, cached=5, reasoning=4, visible_output=7)


def test_deepseek_hit_and_miss() -> None:
    usage = {"prompt_tokens": 100, "completion_tokens": 9, "prompt_cache_hit_tokens": 64,
             "prompt_cache_miss_tokens": 36, "completion_tokens_details": {"reasoning_tokens": 3}}
    assert normalize(usage, Api.CHAT) == Usage(100, 9, cached=64, reasoning=3, visible_output=6)


def test_deepseek_without_prompt_tokens_sums_hit_and_miss() -> None:
    usage = {"prompt_cache_hit_tokens": 64, "prompt_cache_miss_tokens": 36, "completion_tokens": 1}
    result = normalize(usage, Api.CHAT)
    assert result is not None and (result.input, result.cached) == (100, 64)


def test_openrouter_cache_write_and_cost() -> None:
    usage = {"prompt_tokens": 194, "completion_tokens": 2, "total_tokens": 196, "cost": 0.95,
             "prompt_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 100},
             "completion_tokens_details": {"reasoning_tokens": 0}}
    assert normalize(usage, Api.CHAT) == Usage(194, 2, cache_write=100, visible_output=2)


def test_litellm_anthropic_prompt_tokens_already_include_the_cache() -> None:
    usage = {"prompt_tokens": 1500, "completion_tokens": 40, "cache_read_input_tokens": 1024,
             "cache_creation_input_tokens": 300,
             "prompt_tokens_details": {"cached_tokens": 1024, "cache_creation_tokens": 300}}
    assert normalize(usage, Api.CHAT) == Usage(1500, 40, cached=1024, cache_write=300,
                                               visible_output=40)


def test_native_anthropic_cache_counters_are_additive() -> None:
    usage = {"input_tokens": 176, "output_tokens": 40, "cache_read_input_tokens": 1024,
             "cache_creation_input_tokens": 300}
    assert normalize(usage, Api.CHAT) == Usage(1500, 40, cached=1024, cache_write=300,
                                               visible_output=40)


def test_reasoning_without_breakdown_is_estimated_from_the_message() -> None:
    message = {"role": "assistant", "content": "4", "reasoning_content": "two plus two is four"}
    usage = {"input_tokens": 10, "output_tokens": 30}
    result = normalize(usage, Api.CHAT, message, words)
    assert result is not None
    assert (result.reasoning, result.visible_output, result.reasoning_estimated) == (5, 25, True)


def test_reported_breakdown_wins_over_the_estimate() -> None:
    message = {"role": "assistant", "content": "4", "reasoning_content": "two plus two is four"}
    usage = {"prompt_tokens": 10, "completion_tokens": 30,
             "completion_tokens_details": {"reasoning_tokens": 0}}
    result = normalize(usage, Api.CHAT, message, words)
    assert result is not None and (result.reasoning, result.visible_output) == (0, 30)


def test_estimated_reasoning_never_exceeds_output() -> None:
    message = {"reasoning": "a b c d e f g h"}
    result = normalize({"prompt_tokens": 1, "completion_tokens": 3}, Api.CHAT, message, words)
    assert result is not None and (result.reasoning, result.visible_output) == (3, 0)


def test_top_level_reasoning_tokens_are_read() -> None:
    result = normalize({"prompt_tokens": 5, "completion_tokens": 9, "reasoning_tokens": 4}, "chat")
    assert result is not None and result.visible_output == 5


REASONING_MESSAGES = [
    {"reasoning_content": "one two three"},
    {"reasoning": "one two three", "reasoning_details": [
        {"type": "reasoning.text", "text": "one two three", "signature": "sig", "index": 0}]},
    {"reasoning_details": [{"type": "reasoning.summary", "summary": "one two", "index": 0},
                           {"type": "reasoning.text", "text": " three", "index": 1},
                           {"type": "reasoning.encrypted", "data": "opaque", "index": 2}]},
    {"thinking_blocks": [{"type": "thinking", "thinking": "one two three", "signature": "s"}]},
]


@pytest.mark.parametrize("message", REASONING_MESSAGES)
def test_chat_reasoning_fields_are_counted_once(message: dict[str, Any]) -> None:
    assert sum(words(t) for t in reasoning_texts(Api.CHAT, message)) == 3


def test_responses_reasoning_summaries_are_estimated() -> None:
    output = [{"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "a b"}],
               "content": [{"type": "reasoning_text", "text": "c d e"}]},
              {"type": "message", "role": "assistant",
               "content": [{"type": "output_text", "text": "not reasoning"}]}]
    result = normalize({"input_tokens": 3, "output_tokens": 20}, Api.RESPONSES, output, words)
    assert result is not None and result.reasoning == 5


@pytest.mark.parametrize("usage", [None, [], "12", {}, {"completion_tokens": 5},
                                   {"prompt_tokens": "12"}, {"prompt_tokens": True},
                                   {"prompt_tokens": -1}, {"prompt_tokens": float("nan")}])
def test_unusable_usage_is_none(usage: Any) -> None:
    assert normalize(usage, Api.CHAT) is None


def test_ollama_counts_are_read() -> None:
    assert normalize({"prompt_eval_count": 12, "eval_count": 3}, Api.CHAT) == Usage(12, 3, visible_output=3)


usage_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**7), st.floats(), st.text(max_size=3))
usage_dicts = st.dictionaries(
    st.sampled_from(["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                     "cache_read_input_tokens", "cache_creation_input_tokens", "reasoning_tokens",
                     "prompt_cache_hit_tokens", "prompt_cache_miss_tokens",
                     "completion_tokens_details", "prompt_tokens_details"]),
    usage_values | st.dictionaries(st.sampled_from(["cached_tokens", "reasoning_tokens"]), usage_values))


@given(usage_dicts, st.dictionaries(st.sampled_from(["reasoning", "reasoning_content"]), st.text()))
def test_any_usage_normalizes_to_sane_numbers_or_none(usage: dict[str, Any],
                                                      message: dict[str, Any]) -> None:
    result = normalize(usage, Api.CHAT, message, len)
    if result is not None:
        assert min(result.input, result.output, result.reasoning, result.visible_output) >= 0
        assert result.reasoning + result.visible_output == result.output


_COUNTS = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**12), st.text(max_size=3),
                    st.floats(allow_nan=True, allow_infinity=True))
_USAGE_NAMES = ["prompt_tokens", "completion_tokens", "input_tokens", "output_tokens",
                "eval_count", "prompt_eval_count", "cache_read_input_tokens",
                "cache_creation_input_tokens", "prompt_cache_hit_tokens",
                "prompt_cache_miss_tokens", "reasoning_tokens"]
_MESSAGES = st.one_of(st.none(), st.just({"role": "assistant", "content": "ok"}),
                      st.just({"role": "assistant", "content": "ok",
                               "reasoning_content": "one two three"}),
                      st.just([{"type": "reasoning", "summary": [{"text": "a b"}]}]))


@given(st.dictionaries(st.sampled_from(_USAGE_NAMES), _COUNTS), _MESSAGES,
       st.sampled_from([Api.CHAT, Api.RESPONSES, "chat"]))
def test_the_inline_openai_reading_agrees_with_the_general_rules(
        usage: dict[str, Any], response: Any, api: Any) -> None:
    from proxy import usage as module

    found = normalize(usage, api, response, words)
    input_tokens = module._input(usage)
    if input_tokens is None:
        assert found is None
        return
    output = module._first(usage.get("completion_tokens"), usage.get("output_tokens"),
                           usage.get("eval_count")) or 0
    breakdown = module._breakdown(usage)[0]
    reasoning = min(breakdown if breakdown is not None else
                    module._estimate(api, response, words), output)
    assert found is not None
    assert (found.input, found.output, found.reasoning) == (input_tokens, output, reasoning)
    assert found.visible_output == output - reasoning
    assert found.reasoning_estimated == (breakdown is None and reasoning > 0)


@given(usage_dicts, _MESSAGES)
def test_a_usage_in_another_mapping_reads_as_the_dict_does(usage: dict[str, Any],
                                                           response: Any) -> None:
    # `normalize` tests which names a usage holds by iterating it: any mapping gives its keys.
    assert (normalize(MappingProxyType(usage), Api.CHAT, response, words)
            == normalize(usage, Api.CHAT, response, words))


@pytest.mark.parametrize("message", REASONING_MESSAGES)
def test_each_reasoning_field_of_an_answer_is_estimated_when_usage_has_no_breakdown(
        message: dict[str, Any]) -> None:
    found = normalize({"prompt_tokens": 5, "completion_tokens": 10},
                      Api.CHAT, {"role": "assistant", "content": "ok", **message}, words)
    assert found is not None and found.reasoning == 3 and found.reasoning_estimated
