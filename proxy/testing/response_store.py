"""The fake's stored Responses answers (`store` on, the default), kept per credential.

OpenAI keeps a stored response in the project of the API key that made it: only that project's
keys may continue it (`previous_response_id`), retrieve, list its input items, cancel or delete
it. The fake keeps each answer under the credential that made it (`stored_items.credential_of`,
the bearer token standing for the key's project), a bounded number, oldest dropped first, as
`StoredItems` keeps their output items. Another credential asking for it is answered as for an
id never made: no OpenAI text for a response of another project was found, and ids are not
guessable, so "not found" is the shape a client of another project sees [inferred].
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from proxy.lru import LRU


@dataclass(frozen=True)
class Stored:
    chain: list[Any]  # every item of the conversation up to and including this response's output
    response: dict[str, Any]


class StoredResponses:
    """Least recently used first out (`proxy.lru.LRU`); keyed by the response id alone (the
    fake makes them, unique across credentials) with the owner checked on every read."""

    def __init__(self, max_responses: int = 10_000) -> None:
        self._held: LRU[str, tuple[str, Stored]] = LRU(max_responses)

    def put(self, credential: str, response_id: str, stored: Stored) -> None:
        self._held.put(response_id, (credential, stored))

    def get(self, credential: str, response_id: Any) -> Stored | None:
        found = self._held.get(response_id) if isinstance(response_id, str) else None
        return found[1] if found is not None and found[0] == credential else None

    def pop(self, credential: str, response_id: str) -> Stored | None:
        stored = self.get(credential, response_id)
        if stored is not None:
            self._held.pop(response_id)
        return stored

    def __contains__(self, response_id: object) -> bool:
        """Whether any credential holds it (what a test asks of the fake)."""
        return response_id in self._held

    def __iter__(self) -> Iterator[str]:
        """The ids held, least recently used first."""
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)
