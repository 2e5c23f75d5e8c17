"""The retry after OpenAI refuses an item whose reasoning item is not in the request.

OpenAI refuses an item whose id it issued next to a reasoning item when that reasoning item is
missing ("Item 'ws_…' of type 'web_search_call' was provided without its required 'reasoning'
item: 'rs_…'", for `msg_…` and `fc_…` ids too). The proxy never drops a reasoning item and keeps
such an id (`reasoning_items`), but a client may send one so (it kept the items of a response
and dropped its reasoning, or its reference), and repair's note for an interrupted computer call
can stand between the two when a web search comes after a message that follows the call. Which
reasoning item an id names is not known here (the refusal names one item), so the retry after
that refusal takes the id off every produced item no reasoning item comes before in its turn
(nor an `item_reference`, which may be it, stored upstream), nor since the item it names, and
off the run of produced items right before that one (`unreasoned_items`); an item that cannot
go without its id (a web search, a computer call) goes, with the outputs that answer it, and
repair answers what that leaves open. The blobs after the first such item go as well: they
were made over a history that held the missing reasoning item. An item of a turn that had no
reasoning at all goes too: only in that retry, and in the lesson after it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from proxy.conversation import Api, Entries, Entry, without_keys
from proxy.core.reasoning_items import unreasoned_items
from proxy.core.repair import repair
from proxy.core.sanitize import Policy, sanitize


def without_unreasoned_items(entries: Sequence[Entry],
                             named: Collection[str] = ()) -> tuple[Entries, int]:
    """The entries without the ids (or, where one is required, the items and their outputs)
    whose reasoning item is not before them in their turn, nor since an item whose id a
    refusal `named` (with the produced items right before it), repaired; how many of them
    went or changed."""
    entries = tuple(entries)
    if not entries or entries[0].api is not Api.RESPONSES:
        return entries, 0
    gone, stripped = unreasoned_items(entries, named)
    if not gone and not stripped:
        return entries, 0
    # The reasoning item went right before the first of them: every blob after it was made over
    # a history that held it, and goes (the sanitizer's rule for a changed request).
    cleaned = sanitize(entries, Policy.CHEAP, changed_at=min(gone | stripped)).entries
    gone, stripped = unreasoned_items(cleaned, named)
    kept = [without_keys(e, ("id",)) if i in stripped else e
            for i, e in enumerate(cleaned) if i not in gone]
    out = repair(kept).entries
    return out, len(entries) - len({id(e) for e in entries} & {id(e) for e in out})
