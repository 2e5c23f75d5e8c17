"""The record of relayed items' sizes (`proxy.item_sizes`): per tenant, bounded, and what the
estimate makes of it (a recorded reference never counts below its size)."""

from __future__ import annotations

import math
import tracemalloc

from hypothesis import given
from hypothesis import strategies as st

from proxy.anchors import anchor_for, estimate
from proxy.conversation import Entry, entry_from_responses
from proxy.identity import Identities
from proxy.item_sizes import MAX_ID_CHARS, ItemSizes, relayed
from proxy.tokens.rules import REFERENCED_ITEM
from proxy.usage import Usage
from tests.factories import responses

IDS = Identities()


def test_a_size_is_known_to_its_tenant_alone() -> None:
    record = ItemSizes()
    record.record("a", [("msg_1", 500)])
    assert record.of("a").get("msg_1") == 500
    assert record.of("b").get("msg_1") is None
    assert record.of("b").unknown == REFERENCED_ITEM


def test_an_unknown_item_is_the_tenants_largest_else_the_flat_guess() -> None:
    record = ItemSizes()
    assert record.of("a").unknown == REFERENCED_ITEM
    record.record("a", [("fc_1", 30), ("fc_2", 1_800)])
    record.record("a", [("fc_3", 10)])
    assert record.of("a").unknown == 1_800


def test_the_record_is_bounded_and_drops_the_least_recently_used() -> None:
    record = ItemSizes(max_items=3, max_tenants=2)
    record.record("a", [("i1", 1), ("i2", 2), ("i3", 3)])
    assert record.of("a").get("i1") == 1  # named again: now the newest
    record.record("a", [("i4", 4)])
    assert len(record) == 3
    assert record.of("a").get("i2") is None and record.of("a").get("i1") == 1
    record.record("b", [("i5", 5)])
    record.record("c", [("i6", 6)])
    assert record.largest("a") is None  # the tenants' largest are bounded too


def test_ids_no_upstream_makes_are_not_kept() -> None:
    record = ItemSizes()
    record.record("a", [("", 9), ("x" * (MAX_ID_CHARS + 1), 9)])
    assert len(record) == 0 and record.largest("a") is None


def test_an_entry_holds_a_few_hundred_bytes_at_most() -> None:
    """The bound in `item_sizes`'s docstring: 100,000 items in some 20-40 MB."""
    record = ItemSizes(max_items=10_000)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for n in range(10_000):
        record.record("0123456789abcdef0123456789abcdef", [(f"fc_{n:048d}", n)])
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert held / 10_000 < 400


def test_relayed_sizes_take_upstreams_count_where_it_tells_one_items_share() -> None:
    call = {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "run",
            "arguments": "{}"}
    thought = {"type": "reasoning", "id": "rs_1", "summary": []}
    items = [entry_from_responses(thought), entry_from_responses(call)]
    usage = Usage(100, 90, reasoning=60, visible_output=30)
    measured: list[str] = []

    def measure(entry: Entry) -> int:
        measured.append(entry.item_id)
        return 12

    assert relayed(items, usage, measure) == [("rs_1", 60), ("fc_1", 30 + 4)]
    assert measured == []  # the usual answer is not tokenized again
    assert relayed(items, None, measure) == [("rs_1", 12), ("fc_1", 12)]
    two = [entry_from_responses(call), entry_from_responses(dict(call, id="fc_2"))]
    assert relayed(two, usage, measure) == [("fc_1", 12), ("fc_2", 12)]
    assert relayed(items, Usage(100, 0), measure) == [("rs_1", 12), ("fc_1", 12)]
    assert relayed([entry_from_responses({"type": "message", "content": "x"})], usage,
                   measure) == []


IDS_DRAWN = st.sampled_from([f"fc_{n}" for n in range(6)])
RECORDS = st.lists(st.tuples(st.sampled_from(["a", "b"]), IDS_DRAWN, st.integers(0, 5_000)),
                   max_size=30)


@given(RECORDS)
def test_tenants_never_see_each_others_sizes(records: list[tuple[str, str, int]]) -> None:
    record = ItemSizes()
    for tenant, item_id, size in records:
        record.record(tenant, [(item_id, size)])
    for tenant in ("a", "b"):
        own = {item_id: size for who, item_id, size in records if who == tenant}
        view = record.of(tenant)
        assert {i: view.get(i) for i in own} == own
        assert all(view.get(i) is None for i in {i for _, i, _ in records} - own.keys())
        seen = [size for who, _, size in records if who == tenant]  # a size since replaced too
        assert view.unknown == (max(seen, default=0) or REFERENCED_ITEM)


SIZE = 10


@given(st.dictionaries(IDS_DRAWN, st.integers(0, 5_000), min_size=1),
       st.lists(IDS_DRAWN, min_size=1, max_size=6, unique=True),
       st.lists(st.tuples(IDS_DRAWN, st.integers(0, 400)), max_size=4),
       st.sampled_from([0.0, 0.1]))
def test_a_recorded_reference_never_counts_below_its_size(
        sizes: dict[str, int], named: list[str], answers: list[tuple[str, int]],
        margin: float) -> None:
    """Whatever the kept anchors (answers that no longer fit, naming the same items with
    smaller outputs), a reference the record knows adds at least its recorded size."""
    record = ItemSizes()
    record.record("t", sizes.items())
    anchors = [anchor_for(responses({"role": "user", "content": "gone"}), b"",
                          (f"d{n} {item_id}",), Usage(1000, output, visible_output=output))
               for n, (item_id, output) in enumerate(answers)]
    entries = responses({"role": "user", "content": "summary"},
                        *({"type": "item_reference", "id": i} for i in named))
    found = estimate(entries, [SIZE] * len(entries), b"", anchors, SIZE * len(entries),
                     IDS.content_digest, margin, record.of("t"))
    known = sum(sizes[i] for i in named if i in sizes)
    assert found.anchor is None
    assert found.tokens - SIZE * len(entries) >= math.ceil(known * (1 + margin))
    guessed = [i for i in named if i not in sizes]
    if not guessed:
        assert found.guessed == 0
