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

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Stored:
    chain: list[Any]  # every item of the conversation up to and including this response's output
    response: dict[str, Any]


class StoredResponses:
    """Least recently used first out, as `proxy.lru.LRU`; keyed by the response id alone (the
    fake makes them, unique across credentials) with the owner checked on every read."""

    def __init__(self, max_responses: int = 10_000) -> None:
        if max_responses < 1:
            raise ValueError("max_responses must be positive")
        self.max_responses = max_responses
        self._held: OrderedDict[str, tuple[str, Stored]] = OrderedDict()

    def put(self, credential: str, response_id: str, stored: Stored) -> None:
        self._held[response_id] = (credential, stored)
        self._held.move_to_end(response_id)
        if len(self._held) > self.max_responses:
            self._held.popitem(last=False)

    def get(self, credential: str, response_id: Any) -> Stored | None:
        found = self._held.get(response_id) if isinstance(response_id, str) else None
        if found is None or found[0] != credential:
            return None
        self._held.move_to_end(response_id)
        return found[1]

    def pop(self, credential: str, response_id: str) -> Stored | None:
        stored = self.get(credential, response_id)
        if stored is not None:
            del self._held[response_id]
        return stored

    def __contains__(self, response_id: object) -> bool:
        """Whether any credential holds it (what a test asks of the fake)."""
        return response_id in self._held

    def __iter__(self) -> Iterator[str]:
        """The ids held, least recently used first."""
        return iter(list(self._held))

    def __len__(self) -> int:
        return len(self._held)
