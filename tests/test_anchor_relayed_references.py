"""`anchors.estimate` when no anchor fits (a compaction rewrote the prefix, the client dropped or
reordered items) and the list names by `item_reference` items the proxy relayed: each kept
anchor whose answer is referenced counts with its own output (and reasoning, for its reasoning
items); only ids no kept anchor (and no record of relayed sizes) knows are guessed, as the
record's `unknown` (`REFERENCED_ITEM` without one), never the thread's average answer item."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import NO_SIZES, ReferenceSizes, anchor_for, estimate
from proxy.identity import Identities
from proxy.item_sizes import ItemSizes
from proxy.records import Anchor
from proxy.tokens.rules import REFERENCED_ITEM
from proxy.usage import Usage
from tests.factories import responses

IDS = Identities()
MARGIN = 0.03
# The anchors answered a history that is gone (summarized): none of them fits the new list.
OLD = responses({"role": "user", "content": "The history before the summary."})
SUMMARY = {"role": "user", "content": "Summary of the conversation so far."}
NEXT = {"role": "user", "content": "Go on."}
SIZE = 10  # each entry's own size: a reference's JSON included


def _ref(item_id: str) -> dict[str, str]:
    return {"type": "item_reference", "id": item_id}


def _anchor(digests: tuple[str, ...], output: int, reasoning: int = 0) -> Anchor:
    return anchor_for(OLD, b"", digests, Usage(5000, output + reasoning, reasoning=reasoning,
                                                 visible_output=output))


def _extra(items: list[dict[str, Any]], anchors: list[Anchor],
           references: ReferenceSizes = NO_SIZES) -> int:
    """What the estimate adds to the conservative count of `SUMMARY, *items, NEXT`."""
    entries = responses(SUMMARY, *items, NEXT)
    sizes = [SIZE] * len(entries)
    found = estimate(entries, sizes, b"", anchors, sum(sizes), IDS.content_digest, MARGIN,
                     references)
    assert found.anchor is None
    return found.tokens - sum(sizes)


def _margined(tokens: int) -> int:
    return math.ceil(tokens * (1.0 + MARGIN))


# A small tool call after its reasoning, and a long reply: the thread's average answer item
# (900 / 2 = 450) is far from the call's 24 tokens.
CALL = _anchor(("d1 fc_1 rs_1",), output=24, reasoning=6)
REPLY = _anchor(("d2 msg_2",), output=876)


def test_a_reference_to_a_relayed_item_counts_as_its_own_answer() -> None:
    extra = _extra([_ref("rs_1"), _ref("fc_1")], [REPLY, CALL])
    assert extra == _margined(24 + 6)


def test_an_answer_referenced_in_part_counts_whole() -> None:
    # Upstream reported the answer's output, not each item's: all of it, never less.
    answer = _anchor(("d3 msg_3", "d4 fc_4"), output=300)
    assert _extra([_ref("fc_4")], [answer, REPLY]) == _margined(300)
    assert _extra([_ref("msg_3"), _ref("fc_4")], [answer, REPLY]) == _margined(300)


def test_a_reasoning_reference_alone_counts_its_answers_reasoning() -> None:
    assert _extra([_ref("rs_1")], [CALL, REPLY]) == _margined(6)


def test_ids_no_kept_anchor_knows_are_the_guess_not_the_threads_average() -> None:
    extra = _extra([_ref("fc_1"), _ref("msg_elsewhere")], [CALL, REPLY])
    assert extra == _margined(24 + REFERENCED_ITEM)
    assert _extra([_ref("msg_elsewhere")], []) == _margined(REFERENCED_ITEM)
    # With a record of the tenant's relayed items: its largest item.
    record = ItemSizes()
    record.record("tenant", [("msg_big", 700), ("fc_small", 12)])
    extra = _extra([_ref("fc_1"), _ref("msg_elsewhere")], [CALL, REPLY], record.of("tenant"))
    assert extra == _margined(24 + 700)


def test_a_recorded_size_comes_before_its_answers_whole_output() -> None:
    record = ItemSizes()
    record.record("tenant", [("fc_4", 40)])
    answer = _anchor(("d3 msg_3", "d4 fc_4"), output=300)
    assert _extra([_ref("fc_4")], [answer], record.of("tenant")) == _margined(40)


def test_an_answer_whose_output_upstream_did_not_split_is_guessed() -> None:
    # A choice anchor (`n` > 1) claims no output: its items are guessed, as before.
    choice = Anchor(("d5 msg_5",), 1, "other", 5000, 0)
    assert _extra([_ref("msg_5")], [choice, REPLY]) == _margined(REFERENCED_ITEM)


# An answer: its items, each (size, reasoning size before it or None).
ANSWER = st.lists(st.tuples(st.integers(1, 400), st.none() | st.integers(0, 300)),
                  min_size=1, max_size=3)


@given(st.lists(ANSWER, min_size=1, max_size=4), st.data())
def test_relayed_references_are_never_counted_below_their_items(
        answers: list[list[tuple[int, int | None]]], data: st.DataObject) -> None:
    anchors: list[Anchor] = []
    item_sizes: dict[str, int] = {}
    for a, items in enumerate(answers):
        digests = []
        for n, (size, reasoning) in enumerate(items):
            name = f"it_{a}_{n}"
            item_sizes[name] = size
            if reasoning is None:
                digests.append(f"d{a}.{n} {name}")
            else:
                item_sizes[f"rs_{a}_{n}"] = reasoning
                digests.append(f"d{a}.{n} {name} rs_{a}_{n}")
        anchors.append(_anchor(tuple(digests), output=sum(s for s, _ in items),
                               reasoning=sum(r or 0 for _, r in items)))
    names = sorted(item_sizes)
    chosen = data.draw(st.lists(st.sampled_from(names), unique=True))
    strangers = data.draw(st.integers(0, 2))
    refs = [_ref(n) for n in data.draw(st.permutations(chosen))]
    refs += [_ref(f"msg_elsewhere_{k}") for k in range(strangers)]
    extra = _extra(refs, anchors)
    # Upstream counts each referenced item by its content: the estimate holds at least that.
    assert extra >= sum(item_sizes[n] for n in chosen) + strangers
    # A relayed answer is known: the rest of the thread does not change what its items count.
    if not strangers:
        big = _anchor(("dz msg_big",), output=50_000)
        assert _extra(refs, [*anchors, big]) == extra
