"""Reading the summarizer's answer never raises, whatever its upstream sent (SPEC §5, §9): an
odd answer is a failed summary with a stage, never an exception that skips the breaker and
leaves a `compaction_started` without its end."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction import postcheck
from proxy.compaction.summary_reply import read_reply
from proxy.conversation import Api

_scalar = st.one_of(st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=8))
_json = st.recursive(_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)
_chat = st.fixed_dictionaries({}, optional={
    "choices": st.one_of(_json, st.lists(st.fixed_dictionaries({}, optional={
        "message": st.one_of(_json, st.fixed_dictionaries({}, optional={
            "content": _json, "refusal": _json, "tool_calls": _json,
            "reasoning_content": _json})),
        "finish_reason": _json}), max_size=2)),
    "usage": st.one_of(_json, st.fixed_dictionaries({}, optional={"completion_tokens": _json})),
    "error": _json})
_responses = st.fixed_dictionaries({}, optional={
    "output": st.one_of(_json, st.lists(st.fixed_dictionaries(
        {"type": st.sampled_from(["message", "reasoning", "function_call"])},
        optional={"content": st.one_of(_json, st.lists(st.fixed_dictionaries(
            {"type": st.sampled_from(["output_text", "refusal"])},
            optional={"text": _json, "refusal": _json}), max_size=2))}),
        max_size=2)),
    "status": _json, "incomplete_details": _json, "error": _json,
    "usage": st.one_of(_json, st.fixed_dictionaries({}, optional={"output_tokens": _json}))})


def _well_formed(api: Api, reply: Any) -> None:
    assert isinstance(reply.text, str)
    assert reply.finish_reason is None or isinstance(reply.finish_reason, str)
    assert reply.output_tokens is None or type(reply.output_tokens) is int
    assert reply.refused is None or isinstance(reply.refused, str)
    assert isinstance(reply.said, str) and isinstance(reply.held, str)
    # A refusal is never read as a summary, whatever text came beside it.
    assert reply.refused is None or reply.text == ""
    postcheck.check_reply(reply)


@given(_chat)
def test_any_chat_answer_reads_as_a_reply(doc: dict[str, Any]) -> None:
    _well_formed(Api.CHAT, read_reply(Api.CHAT, doc))


@given(_responses)
def test_any_responses_answer_reads_as_a_reply(doc: dict[str, Any]) -> None:
    _well_formed(Api.RESPONSES, read_reply(Api.RESPONSES, doc))


def test_a_count_that_is_not_a_number_is_left_out() -> None:
    chat = {"choices": [{"message": {"content": "s"}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": "12"}}
    assert read_reply(Api.CHAT, chat).output_tokens is None
    assert read_reply(Api.RESPONSES, {"output": 5, "status": "completed"}).text == ""
