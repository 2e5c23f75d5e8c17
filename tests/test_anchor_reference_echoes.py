"""`anchors.estimate` with answers echoed by `item_reference`: the anchor is used iff every
item of its answer is echoed, whole or by a reference to the id the proxy relayed; references
no anchor covers are counted by a guess, not by their own JSON."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import anchor_for, estimate, response_digests
from proxy.conversation import Api
from proxy.identity import Identities
from proxy.tokens.rules import REFERENCED_ITEM
from proxy.usage import Usage
from tests.factories import responses

IDS = Identities()
ASK = {"role": "user", "content": "Fix the lexer."}
NEXT = {"role": "user", "content": "Go on."}
OUTPUT = 400


def _message(n: int) -> dict[str, Any]:
    return {"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": f"Step {n} done.", "annotations": []}]}


def _call(n: int) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": "read",
            "arguments": f'{{"path":"f{n}.py"}}', "status": "completed"}


def _reasoning(n: int) -> dict[str, Any]:
    return {"type": "reasoning", "id": f"rs_{n}", "summary": [], "encrypted_content": "gAAA"}


def _ref(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def _whole(item: dict[str, Any]) -> dict[str, Any]:
    """The echo an SDK user writes back: no `id` or `status` (the sanitizer drops ids too)."""
    return {k: v for k, v in item.items() if k not in ("id", "status")}


def _estimate(answer: list[dict[str, Any]], echo: list[dict[str, Any]], anchors: Any = None):
    digests = response_digests(Api.RESPONSES, answer, IDS)
    if anchors is None:
        anchors = [anchor_for(responses(ASK), b"", digests,
                              Usage(1000, OUTPUT, visible_output=OUTPUT))]
    entries = responses(ASK, *echo, NEXT)
    sizes = [10] * len(entries)
    return estimate(entries, sizes, b"", anchors, sum(sizes), IDS.content_digest)


def test_an_answer_echoed_by_reference_is_covered_by_its_anchor() -> None:
    answer = [_reasoning(1), _call(1)]
    found = _estimate(answer, [_ref("rs_1"), _ref("fc_1"),
                               {"type": "function_call_output", "call_id": "call_1",
                                "output": "x"}])
    assert found.anchor is not None
    # Input and output from upstream; the call's reference not counted besides; the reasoning
    # reference, the output and the new message by their sizes (a reasoning item is not in
    # the visible output, and whole it counts by its summary).
    assert found.tokens == 1000 + OUTPUT + 3 * 10


def test_a_mixed_echo_uses_the_anchor() -> None:
    answer = [_message(1), _call(2)]
    assert _estimate(answer, [_whole(_message(1)), _ref("fc_2")]).anchor is not None
    assert _estimate(answer, [_ref("msg_1"), _whole(_call(2))]).anchor is not None


def test_a_reference_to_another_item_is_not_the_echo() -> None:
    answer = [_message(1)]
    assert _estimate(answer, [_ref("msg_9")]).anchor is None


def test_an_unknown_reference_counts_as_the_guess_and_says_so() -> None:
    answer = [_message(1), _call(2)]
    found = _estimate(answer, [_ref("msg_1"), _ref("fc_2"), _ref("msg_elsewhere")])
    assert found.anchor is not None
    assert found.tokens == 1000 + OUTPUT + 10 + 10 + REFERENCED_ITEM
    assert found.guessed == REFERENCED_ITEM


def test_without_any_anchor_a_reference_counts_as_the_guess() -> None:
    found = _estimate([_message(1)], [_ref("msg_1"), _ref("fc_2")], anchors=[])
    assert found.anchor is None
    assert found.tokens == 4 * 10 + 2 * REFERENCED_ITEM


def test_references_before_the_anchor_are_in_its_input_count() -> None:
    first = [_message(1)]
    earlier = responses(ASK, _ref("msg_1"), NEXT)
    second = [_call(2)]
    anchor = anchor_for(earlier, b"", response_digests(Api.RESPONSES, second, IDS),
                        Usage(5000, 50, visible_output=50))
    entries = responses(ASK, _ref("msg_1"), NEXT, _ref("fc_2"),
                        {"type": "function_call_output", "call_id": "call_2", "output": "x"})
    found = estimate(entries, [10] * len(entries), b"", [anchor], 50, IDS.content_digest)
    assert first and found.anchor is anchor and found.tokens == 5000 + 50 + 10


ITEM = st.sampled_from(["message", "call"])
ECHO = st.sampled_from(["whole", "reference", "wrong_reference", "wrong_content"])
REASONING_ECHO = st.sampled_from(["none", "whole", "reference", "dropped"])


@given(st.lists(st.tuples(ITEM, REASONING_ECHO, ECHO), min_size=1, max_size=5))
def test_the_anchor_is_used_iff_every_echoed_item_matches(plan: list[tuple[str, str, str]]) -> None:
    answer: list[dict[str, Any]] = []
    echo: list[dict[str, Any]] = []
    for n, (kind, reasoning, how) in enumerate(plan):
        item = _message(n) if kind == "message" else _call(n)
        if reasoning != "none":
            answer.append(_reasoning(n))
            if reasoning == "whole":
                echo.append(_whole(_reasoning(n)))
            elif reasoning == "reference":
                echo.append(_ref(f"rs_{n}"))
        answer.append(item)
        if how == "whole":
            echo.append(_whole(item))
        elif how == "reference":
            echo.append(_ref(item["id"]))
        elif how == "wrong_reference":
            echo.append(_ref(f"{item['id']}_other"))
        else:
            changed = _message(n + 100) if kind == "message" else _call(n + 100)
            echo.append(_whole(changed))
    matches = all(how in ("whole", "reference") for _, _, how in plan)
    assert (_estimate(answer, echo).anchor is not None) == matches
