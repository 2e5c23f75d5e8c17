"""The anchored estimate is never below the conservative estimate of the whole projection (SPEC §6).

SPEC §6: "Estimate = the latest usage anchor + an estimate of what came after it, never below
a conservative estimate of the whole projection." For any projection of either API, any
per-entry sizes, any anchors (one whose echo the projection holds, a stale one, none, the
prefix edited or not) and any `conservative_total`, `estimate(...).tokens` is at least
`conservative_total`: an anchor with a small reported count (upstream counted less than the
local tokenizer; a cheap stage shrank the prefix since) must not pull the trigger's input
below the floor.

The mutation this guards against: a chat projection's anchored value returned without the
`max(..., conservative_total)` floor. Only an example test pinned the floor, for one list.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import context_bytes, estimate, make_anchor, response_entries
from proxy.conversation import Api
from proxy.identity import Identities
from proxy.records import Anchor
from proxy.usage import normalize
from tests.factories import entries_of, r_assistant, r_call, r_output, r_reasoning, r_user
from tests.strategies import conversations

IDS = Identities()
TOOLS = [{"type": "function", "function": {"name": "read_file", "parameters": {}}}]
CONTEXT = context_bytes(TOOLS, None, "gpt-4o")

CHAT_ANSWER = [{"role": "assistant", "content": "Reading it now.",
                "tool_calls": [{"id": "call_next", "type": "function",
                                "function": {"name": "read_file", "arguments": "{\"path\":\"a.py\"}"}}]}]
CHAT_AFTER = [{"role": "tool", "tool_call_id": "call_next", "content": "print('a')"},
              {"role": "user", "content": "and now?"}]
RESPONSES_ANSWER = [r_reasoning("rs_next", summary="Read a.py first."),
                    r_assistant("Reading it now.", id="msg_next"),
                    r_call("read_file", "call_next", {"path": "a.py"}, id="fc_next")]
RESPONSES_AFTER = [r_output("call_next", "print('a')"), r_user("and now?")]


def _echo(api: str, answer: list[dict[str, Any]], by_reference: bool, drop_reasoning: bool) -> list[Any]:
    """The answer as the client sends it back: whole, or (a Responses client with `store` on)
    by `item_reference`, its reasoning items now and then left out."""
    if api == "chat":
        return answer
    out = [item for item in answer if not (drop_reasoning and item.get("type") == "reasoning")]
    return [{"type": "item_reference", "id": item["id"]} for item in out] if by_reference else out


def _anchor(api: str, projection: list[Any], answer: list[Any], context: bytes,
            counts: tuple[int, int, int]) -> Anchor:
    """The anchor of `answer` to `projection`, with upstream's counts as drawn."""
    made = make_anchor(entries_of(api, projection), context,
                       response_entries(api, answer[0] if api == "chat" else answer),
                       _usage(api), IDS.digest)
    input_tokens, output_tokens, reasoning_tokens = counts
    return Anchor(made.response_digests, made.position, made.prefix_digest, input_tokens,
                  output_tokens, reasoning_tokens=reasoning_tokens)


def _usage(api: str) -> Any:
    usage = normalize({"prompt_tokens": 1, "completion_tokens": 1} if api == "chat"
                      else {"input_tokens": 1, "output_tokens": 1}, api)
    assert usage is not None
    return usage


counts = st.tuples(st.integers(0, 200_000), st.integers(0, 20_000), st.integers(0, 5_000))


@st.composite
def estimate_cases(draw: st.DrawFn) -> tuple[str, list[Any], list[Anchor]]:
    """A projection holding an answer's echo (and what followed it), with the anchors a thread
    keeps: the answer's own, a stale one (made for the list one entry shorter), both or none,
    latest first in any order; now and then the prefix edited after the anchor was made."""
    api = draw(st.sampled_from(("chat", "responses")))
    projection = draw(conversations(api, max_turns=3).filter(bool))
    answer, after = (CHAT_ANSWER, CHAT_AFTER) if api == "chat" else (RESPONSES_ANSWER, RESPONSES_AFTER)
    # Mostly the request's own tools: other tools make every anchor stale.
    context = CONTEXT if draw(st.integers(0, 7)) else context_bytes(None, None, "gpt-4o")
    own = _anchor(api, projection, answer, context, draw(counts))
    stale = _anchor(api, projection[:-1], answer, context, draw(counts))
    kept = [own] if draw(st.integers(0, 7)) else []
    anchors = draw(st.permutations(kept + [stale] if draw(st.booleans()) else kept))
    echo = _echo(api, answer, draw(st.booleans()), draw(st.booleans()))
    elements = [*projection, *echo, *after[:draw(st.integers(0, len(after)))]]
    if draw(st.integers(0, 7)) == 0:
        elements[0] = {**elements[0], "edited": True}
    return api, elements, anchors


@given(estimate_cases(), st.data())
def test_the_estimate_is_never_below_the_conservative_total(case: tuple, data: st.DataObject) -> None:
    api, elements, anchors = case
    entries = entries_of(api, elements)
    sizes = data.draw(st.lists(st.integers(0, 50_000), min_size=len(entries), max_size=len(entries)))
    margin = data.draw(st.sampled_from((0.0, 0.1, 0.25, 1.0)))
    # Any floor, one the size of the whole list (as a local count of the projection is), or
    # one just around what the estimate gives with no floor at all, where a lost floor shows.
    unfloored = estimate(entries, sizes, CONTEXT, anchors, 0, IDS.digest, margin).tokens
    conservative_total = data.draw(
        st.integers(0, 1_000_000)
        | st.integers(0, 50_000).map(lambda extra: sum(sizes) + extra)
        | st.integers(-1_000, 1_000).map(lambda delta: max(0, unfloored + delta)))
    found = estimate(entries, sizes, CONTEXT, anchors, conservative_total, IDS.digest, margin)
    assert found.tokens >= conservative_total, (found, conservative_total)
