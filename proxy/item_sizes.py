"""Token sizes of the Responses output items the proxy relayed, per tenant (SPEC §6).

A client with `store` on may echo an earlier answer's items by `item_reference` (their id), and
upstream counts each as the item it stands for. The proxy relayed those items: `ItemSizes`
remembers what each counts, so the estimate counts a reference by what it holds even where no
usage anchor covers it (an edit of an early message, a branch under another thread id, a
compaction). Keyed by tenant and item id: one tenant's ids never name another's sizes, as
upstream keeps one project's items from another's.

Bounded: `MAX_ITEMS` items in all, least recently used dropped first (a lookup makes an item
newer, so a long thread's early items, named again each turn, stay), and `MAX_TENANTS` tenants'
largest item. An id longer than `MAX_ID_CHARS` (none of upstream's) is not kept, so an entry
holds at most some 400 bytes: the key's tuple and id string, an int, the ordered dict's link.
At 100,000 items that is at most about 40 MB, some 20 MB with upstream's ids (about 50
characters); `tests/test_item_sizes.py` measures it.

Not persisted. A write per answer is what `UsageRecorder` stopped making below half the
trigger, for the CPU it took from the event loop; and a size lost is only a guess: a reference
the record does not hold (after a restart, on another instance, dropped by the bound) counts as
the tenant's largest item, else `rules.REFERENCED_ITEM`, and a request that only those guesses
put over the model's limit is forwarded, upstream's verdict deciding (`CompactionFlow`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from proxy.conversation import REASONING, Entry
from proxy.lru import LRU
from proxy.tokens.rules import CALL, MESSAGE, REFERENCED_ITEM
from proxy.usage import Usage

MAX_ITEMS = 100_000
MAX_TENANTS = 8_192
MAX_ID_CHARS = 128


class ItemSizes:
    def __init__(self, max_items: int = MAX_ITEMS, max_tenants: int = MAX_TENANTS) -> None:
        self._sizes: LRU[tuple[str, str], int] = LRU(max_items)
        # The largest item recorded for a tenant: what an unknown reference of its counts.
        self._largest: LRU[str, int] = LRU(max_tenants)

    def record(self, tenant: str, sizes: Iterable[tuple[str, int]]) -> None:
        """Each (item id, tokens) of an answer relayed to `tenant`."""
        largest = self._largest.get(tenant) or 0
        for item_id, tokens in sizes:
            if not item_id or len(item_id) > MAX_ID_CHARS:
                continue
            self._sizes.put((tenant, item_id), tokens)
            largest = max(largest, tokens)
        if largest:
            self._largest.put(tenant, largest)

    def of(self, tenant: str) -> TenantSizes:
        return TenantSizes(self, tenant)

    def get(self, tenant: str, item_id: str) -> int | None:
        return self._sizes.get((tenant, item_id))

    def largest(self, tenant: str) -> int | None:
        return self._largest.get(tenant)

    def __len__(self) -> int:
        return len(self._sizes)


class TenantSizes:
    """One tenant's view, what the estimate reads (`anchors.ReferenceSizes`): `get(item_id)`
    the tokens of an item relayed to it, `unknown` what one it never got counts."""

    __slots__ = ("_sizes", "_tenant", "_unknown")

    def __init__(self, sizes: ItemSizes, tenant: str) -> None:
        self._sizes = sizes
        self._tenant = tenant
        self._unknown: int | None = None

    def get(self, item_id: str) -> int | None:
        return self._sizes.get(self._tenant, item_id)

    @property
    def unknown(self) -> int:
        """The tenant's largest item recorded, else `REFERENCED_ITEM`: a guess that errs high
        (an unknown reference is mostly one of a history the proxy lost, whose items vary),
        and a guess never gets a request refused."""
        if self._unknown is None:
            self._unknown = self._sizes.largest(self._tenant) or REFERENCED_ITEM
        return self._unknown


def relayed(items: Sequence[Entry], usage: Usage | None,
            measure: Callable[[Entry], int]) -> list[tuple[str, int]]:
    """(id, tokens) of an answer's output `items`: what upstream counts of one referenced (the
    item, as if sent whole).

    Upstream's own count where it tells one item's share: the visible output when one item
    (not reasoning) holds it all, with an item's few tokens of framing, and a reasoning item's
    share of the reasoning tokens (an upper bound: OpenAI strips earlier turns' reasoning).
    Else `measure` (the estimator's count of an input entry): an agent's usual answer, one call
    or one message, is not tokenized again, on the path of every answer."""
    answer = sum(1 for item in items if item.kind is not REASONING)
    thoughts = len(items) - answer
    out = []
    for item in items:
        if not item.item_id:
            continue
        if usage is not None and item.kind is REASONING and usage.reasoning > 0:
            size = math.ceil(usage.reasoning / thoughts)
        elif usage is not None and item.kind is not REASONING and answer == 1 \
                and usage.visible_output > 0:
            size = usage.visible_output + _FRAMING
        else:
            size = measure(item)
        out.append((item.item_id, size))
    return out


# An item's tokens around its content as input (`rules.MESSAGE` and its role), which its output
# count leaves out; a call's output count holds its name (`rules.CALL` is no more).
_FRAMING = max(MESSAGE, CALL) + 1
