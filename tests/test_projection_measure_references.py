"""The compaction post-check's measure (`projection.measure_projection`) counts an
`item_reference` as the request's estimate does (`anchors.estimate`): one no usable anchor
covers counts its recorded size (`proxy.item_sizes`), else is a guess (the tenant's largest
recorded item, else `REFERENCED_ITEM`), never the few tokens of its own JSON."""

from __future__ import annotations

import math
from typing import Any

from proxy.anchors import NO_SIZES, ReferenceSizes, anchor_for
from proxy.compaction.trigger import Thresholds
from proxy.identity import Identities
from proxy.item_sizes import ItemSizes
from proxy.projection import Situation, View, measure_projection
from proxy.settings import parse_settings
from proxy.tokens.encoding import tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.images import image_rule
from proxy.tokens.rules import REFERENCED_ITEM
from proxy.usage import Usage
from tests.factories import responses

SETTINGS = parse_settings({"upstreams": {"up": {"base_url": "http://127.0.0.1:9/v1"}}}, {})
ESTIMATOR = TokenEstimator(tokenizer_for("gpt-4o", None), SETTINGS.tokens,
                           image_rule("gpt-4o", None))
IDS = Identities(64)
# Far above anything measured here: no cheap stage touches the entries.
THRESHOLDS = Thresholds(trigger=900_000, limit=1_000_000, keep_tokens=None, keep_messages=4,
                        profiled=False)
ASK = {"role": "user", "content": "Fix the lexer."}
NEXT = {"role": "user", "content": "Go on."}


def _measure(items: list[dict[str, Any]], anchors: tuple[Any, ...] = (),
             references: ReferenceSizes = NO_SIZES) -> tuple[int, int]:
    """(the post-check's measure, the conservative total of the same entries)."""
    entries = responses(*items)
    situation = Situation(SETTINGS.compaction, ESTIMATOR, IDS, THRESHOLDS, anchors=anchors,
                          references=references)
    view = View(entries, IDS)
    return measure_projection(view, situation)(entries), ESTIMATOR.conservative_total(entries)


def _guess(per_item: int) -> int:
    return math.ceil(per_item * (1.0 + ESTIMATOR.margin))


def test_an_unknown_reference_is_counted_as_a_guessed_item_not_its_json() -> None:
    measured, conservative = _measure([ASK, {"type": "item_reference", "id": "msg_elsewhere"},
                                       NEXT])
    assert measured == conservative + _guess(REFERENCED_ITEM)


def test_an_unknown_reference_is_the_guess_not_the_threads_average_answer_item() -> None:
    # Two anchored answers of 2 and 1 items, 900 output tokens in all: 300 a item, which an
    # item of an older answer (a file written) may be far above.
    digests_a = ("d1 msg_a", "d2 fc_a")
    digests_b = ("d3 msg_b",)
    anchors = (anchor_for(responses(ASK), b"", digests_a, Usage(500, 600, visible_output=600)),
               anchor_for(responses(ASK, NEXT), b"", digests_b,
                          Usage(700, 300, visible_output=300)))
    measured, conservative = _measure([ASK, {"type": "item_reference", "id": "msg_gone"}, NEXT],
                                      anchors)
    assert measured == conservative + _guess(REFERENCED_ITEM)
    record = ItemSizes()
    record.record("tenant", [("msg_a", 40), ("fc_written", 1_500), ("msg_b", 300)])
    measured, conservative = _measure([ASK, {"type": "item_reference", "id": "msg_gone"}, NEXT],
                                      anchors, record.of("tenant"))
    assert measured == conservative + _guess(1_500)


def test_a_recorded_reference_is_its_size_whatever_the_anchors() -> None:
    record = ItemSizes()
    record.record("tenant", [("fc_old", 1_234)])
    measured, conservative = _measure([ASK, {"type": "item_reference", "id": "fc_old"}, NEXT],
                                      (), record.of("tenant"))
    assert measured == conservative + _guess(1_234)


def test_without_references_the_measure_is_the_conservative_total() -> None:
    measured, conservative = _measure([ASK, NEXT])
    assert measured == conservative


def test_a_reference_to_an_item_the_proxy_relayed_is_covered_by_its_anchor() -> None:
    """The anchor still fits (its prefix is intact): the referenced item counts as its answer's
    output, which upstream reported, not as a guess."""
    anchor = anchor_for(responses(ASK), b"", ("digest msg_a",), Usage(500, 600, visible_output=600))
    items = [ASK, {"type": "item_reference", "id": "msg_a"}, NEXT]
    measured, _ = _measure(items, (anchor,))
    after = ESTIMATOR.sizes(responses(*items))[2]
    assert measured == 500 + 600 + math.ceil(after * (1.0 + ESTIMATOR.margin))


def test_after_a_summary_a_relayed_item_counts_as_its_answer_not_the_average() -> None:
    """No anchor fits a compacted projection (its prefix is the summary): a reference to an item
    the proxy relayed counts as the output and reasoning of the kept anchor that answered it."""
    small = anchor_for(responses(ASK), b"", ("digest fc_a rs_a",),
                       Usage(500, 30, reasoning=6, visible_output=24))
    large = anchor_for(responses(ASK, NEXT), b"", ("digest msg_b",),
                       Usage(700, 900, visible_output=900))
    summary = {"role": "user", "content": "Summary: the lexer was read."}
    items = [summary, {"type": "item_reference", "id": "rs_a"},
             {"type": "item_reference", "id": "fc_a"}, NEXT]
    measured, conservative = _measure(items, (large, small))
    assert measured == conservative + _guess(24 + 6)
