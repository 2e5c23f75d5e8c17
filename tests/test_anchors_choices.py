"""Anchors for an answer of several choices (`n` > 1): one per distinct choice, none claiming
the output upstream counted for all of them together."""

from __future__ import annotations

from proxy.anchors import choice_anchors, projection_digest, response_digests
from proxy.conversation import Api
from proxy.identity import Identities
from proxy.usage import Usage
from tests.factories import chat

IDS = Identities()
PROJECTION = chat({"role": "user", "content": "Name a colour."})
USAGE = Usage(input=700, output=900, cached=128, visible_output=900)


def _digests(*texts: str) -> list[tuple[str, ...]]:
    return [response_digests(Api.CHAT, {"role": "assistant", "content": t}, IDS) for t in texts]


def test_each_distinct_choice_gets_an_anchor_without_an_output_claim() -> None:
    found = choice_anchors(PROJECTION, b"ctx", _digests("Red.", "Blue.", "Red."), USAGE)
    assert [a.response_digests for a in found] == _digests("Red.", "Blue.")
    assert {(a.input_tokens, a.output_tokens, a.cached_tokens, a.position) for a in found} == \
        {(700, 0, 128, 1)}
    assert {a.prefix_digest for a in found} == {projection_digest(PROJECTION, b"ctx")}


def test_a_single_choice_keeps_upstreams_output_count() -> None:
    (anchor,) = choice_anchors(PROJECTION, b"ctx", _digests("Red."), USAGE)
    assert (anchor.input_tokens, anchor.output_tokens) == (700, 900)
