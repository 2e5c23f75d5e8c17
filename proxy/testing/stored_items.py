"""The output items of stored Responses answers, which later requests name by `item_reference`.

With `store` on (the Responses default) OpenAI keeps what a response produced, and a client may
send an earlier item as `{"type": "item_reference", "id": ...}` instead of its content
(PROTOCOL.md §6.2). The fake keeps each stored answer's output items under the credential that
made it (a bearer token stands for the key's project: another key's items are unknown here),
a bounded number, oldest dropped first. `expand` puts the items in place of their references
before the rules and the prompt count look at a request, as upstream reads them from its store.

Only output items are kept. The items of a request's own `input` are stored with the response
too (`GET .../input_items` lists them with ids), but whether a reference to one of those
resolves is not verified, so the fake answers it as unknown. A reference to an item the same
request sends inline names its id twice: the rules answer OpenAI's duplicate error first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from proxy.lru import LRU
from proxy.testing import rejections
from proxy.testing.rejections import Rejection

Item = Mapping[str, Any]
Resolve = Callable[[Any], Item | None]  # an item id -> the stored item, or None


class StoredItems:
    def __init__(self, max_items: int = 100_000) -> None:
        self._items: LRU[tuple[str, str], Item] = LRU(max_items)

    def remember(self, credential: str, items: Iterable[Any]) -> None:
        for item in items:
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                self._items.put((credential, item["id"]), _stored_form(item))

    def forget(self, credential: str, items: Iterable[Any]) -> None:
        for item in items:
            if isinstance(item, Mapping) and isinstance(item.get("id"), str):
                self._items.pop((credential, item["id"]))

    def resolver(self, credential: str) -> Resolve:
        def resolve(item_id: Any) -> Item | None:
            return self._items.get((credential, item_id)) if isinstance(item_id, str) else None
        return resolve


def credential_of(headers: Mapping[str, str]) -> str:
    """Whose stored items a request may name: its bearer token stands for the key's project."""
    return headers.get("authorization", "")


def _stored_form(item: Item) -> Item:
    # Upstream reads a stored reasoning item itself: a referenced one brings no client blob
    # to verify, so the copy holds none (else the fake's binding of the blob to the history it
    # was made in would refuse a reference whose earlier history a compaction rewrote).
    return {k: v for k, v in item.items() if k != "encrypted_content"}


def is_reference(item: Any) -> bool:
    """An `item_reference`: typed so, or with neither `type` nor `role` (the type is optional on
    a reference, openai-python's `ItemReference`; a message is the other item without one)."""
    if not isinstance(item, Mapping):
        return False
    found = item.get("type")
    return found == "item_reference" or (
        found is None and "role" not in item and isinstance(item.get("id"), str))


def expand(items: Sequence[Any], resolve: Resolve) -> list[Any] | Rejection:
    """`items` with each `item_reference` replaced by the stored item it names; the rejection
    for the first reference to an item the store does not hold."""
    out: list[Any] = []
    for item in items:
        if not is_reference(item):
            out.append(item)
            continue
        found = resolve(item.get("id"))
        if found is None:
            return not_found(item.get("id"))
        out.append(found)
    return out


def not_found(item_id: Any) -> Rejection:
    """A reference to an item upstream does not hold, with `store` on. Text and HTTP 404 as
    clients quote OpenAI's answer (the `store: false` text without its second sentence);
    `param` and `code` as that `store: false` answer has them [MEM: not seen for this one]."""
    return rejections.openai(f"Item with id '{item_id}' not found.", param="input", status=404)
