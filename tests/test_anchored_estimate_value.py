"""`anchors.estimate`'s answer is an `AnchoredEstimate` on every path, and the same tuple.

It is built with `tuple.__new__` (in C) rather than the named tuple's own `__new__`: the value
must stay the named tuple, fields and all, whether an anchor fitted (chat, Responses) or not."""

from __future__ import annotations

from proxy.anchors import AnchoredEstimate, estimate
from proxy.conversation import Api
from tests.test_anchors import (NEXT, PROJECTION, RESPONSE, RESPONSES_OUTPUT,
                                RESPONSES_PROJECTION, USAGE, anchor_for, estimated)


def _check(found: tuple, tokens: int, anchor: object, guessed: int = 0) -> None:
    assert type(found) is AnchoredEstimate
    assert found == (tokens, anchor, guessed) and found.tokens == tokens
    assert found.anchor is anchor and found.guessed == guessed
    assert found._asdict() == {"tokens": tokens, "anchor": anchor, "guessed": guessed}


def test_no_anchor_that_fits_is_the_conservative_total() -> None:
    _check(estimate((), [], b"", (), 123, str), 123, None)
    _check(estimated(PROJECTION, [anchor_for(NEXT, RESPONSE, USAGE)], conservative=77), 77, None)


def test_a_chat_anchor_that_fits() -> None:
    anchor = anchor_for(PROJECTION, RESPONSE, USAGE)
    found = estimated(NEXT, [anchor])
    assert found.anchor is anchor and found.tokens > 40_000
    _check(found, found.tokens, anchor)


def test_a_responses_anchor_that_fits() -> None:
    usage = {"input_tokens": 9_000, "output_tokens": 80}
    anchor = anchor_for(RESPONSES_PROJECTION, RESPONSES_OUTPUT, usage, Api.RESPONSES)
    result = {"type": "function_call_output", "call_id": "c1", "output": "a b"}
    found = estimated([*RESPONSES_PROJECTION, *RESPONSES_OUTPUT, result], [anchor], api=Api.RESPONSES)
    assert found.anchor is anchor and found.tokens > 9_000
    _check(found, found.tokens, anchor)
