"""What a summarizer request is, whatever the conversation and the client's body (SPEC §5).

From SPEC alone: "text only, no tools (render the transcript as text inside one user message)
... none of the session's cache or identity keys (`prompt_cache_key`, `user`, `metadata`)", and
"a prefix larger than the summarizer's own window is summarized in chunks, rolling": so each
step's request, with a carried summary as long as an answer may be, fits that window. Drawn:
conversations of both APIs in every client shape (huge arguments among them, so some prefixes
need many chunks), a client body full of session keys, a window, a strategy and an earlier
summary or none.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.cutoff import FULL, PARTIAL, Cutoff
from proxy.compaction.summarizer import plan_summary
from proxy.conversation import Api, leading_instructions
from proxy.settings import SummarizerSettings
from tests.factories import entries_of
from tests.strategies_more import richer
from tests.test_compaction_support import count, measure

SESSION_KEYS = {"prompt_cache_key": "pck-1", "user": "user-1", "metadata": {"thread_id": "t"},
                "safety_identifier": "sid", "tools": [{"type": "function", "function": {"name": "f"}}],
                "tool_choice": "auto", "stream": True, "stream_options": {"include_usage": True},
                "parallel_tool_calls": True, "previous_response_id": "resp_1", "store": True,
                "max_completion_tokens": 300, "reasoning": {"effort": "high"}}
ALLOWED = {"chat": {"model", "messages", "max_tokens", "max_completion_tokens"},
           "responses": {"model", "instructions", "input", "max_output_tokens", "store"}}


@st.composite
def plans(draw: st.DrawFn) -> tuple[str, Any, int, int]:
    api = draw(st.sampled_from(("chat", "responses")))
    entries = entries_of(api, draw(richer(api, messy=draw(st.booleans()), max_turns=5)))
    lead = leading_instructions(entries)
    index = draw(st.integers(min(lead + 1, len(entries)), len(entries)))
    start = draw(st.integers(lead, index))
    previous = draw(st.none() | st.text(max_size=3000)) if start > lead else None
    strategy = draw(st.sampled_from((PARTIAL, FULL)))
    max_output = draw(st.sampled_from((300, 1000, 4000)))
    window = draw(st.integers(max_output * 2 + 1500, 40_000))
    doc = draw(st.dictionaries(st.sampled_from(sorted(SESSION_KEYS)), st.just(None))
               .map(lambda keys: {k: SESSION_KEYS[k] for k in keys}))
    plan = plan_summary(entries, Cutoff(index, lead, start, strategy, previous), api=Api(api),
                        model="summarizer", now=datetime(2026, 5, 1, 9, 30, tzinfo=UTC),
                        settings=SummarizerSettings(max_output_tokens=max_output), window=window,
                        count=count, measure=measure, client_doc=doc)
    return api, plan, window, max_output


def _texts(api: str, body: dict[str, Any]) -> list[str]:
    """The request's text, checking it is plain text in one user message (after a system one)."""
    if api == "chat":
        messages = body["messages"]
        assert [m["role"] for m in messages] == ["system", "user"]
        assert all(set(m) == {"role", "content"} and isinstance(m["content"], str) for m in messages)
        return [m["content"] for m in messages]
    (item,) = body["input"]
    assert item["role"] == "user" and [p["type"] for p in item["content"]] == ["input_text"]
    assert isinstance(body["instructions"], str) and body["store"] is False
    return [body["instructions"], item["content"][0]["text"]]


@given(plans(), st.data())
def test_every_step_is_plain_text_without_session_keys_and_fits_the_window(
        drawn: tuple, data: st.DataObject) -> None:
    api, plan, window, max_output = drawn
    assert plan.steps >= 1
    for step in range(plan.steps):
        # What a step carries: the earlier summary at step 0, then an answer (at most
        # `max_output` tokens by `count`: 4 characters a token, less one).
        carried = plan.previous_summary if step == 0 else \
            data.draw(st.integers(0, 4 * (max_output - 1)).map(lambda n: "s" * n), f"carried {step}")
        body = plan.request(step, carried)
        assert set(body) <= ALLOWED[api], set(body) - ALLOWED[api]
        assert sum(1 for k in body if k.startswith("max_")) == 1
        assert sum(count(t) for t in _texts(api, body)) <= window, f"step {step} of {plan.steps}"
