"""Which upstream made each stored response and stored chat completion the proxy relayed.

The requests on one of them carry no model: `GET`/`DELETE /v1/responses/{id}`, `POST
/v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`, and the stored chat
completions' `GET`/`POST`/`DELETE /v1/chat/completions/{id}` and `GET .../{id}/messages`.
Routed by model they would all go where model "" goes, while the id lives on the one upstream
that made it. The pipeline sees every answer it relays (a body's `id`, a stream's first chunk
or `response.created`), so it remembers id -> upstream here, and the pass-through asks.

Only what the upstream keeps is remembered: a chat completion made with `store: true`, a
response not made with `store: false`. The memory is the process's own and bounded (the oldest
go first, as they are the least likely to be asked for): an id made before a restart, by
another instance, or pushed out, goes by the route of model "" as before.
"""

from __future__ import annotations

from collections import OrderedDict

from proxy.conversation import Api
from proxy.inbound import Inbound
from proxy.server.prepared import Prepared
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.settings import Settings, UpstreamSettings

# About 190 bytes each (the id's string and its entry, measured): some 19 MB when full. A
# Responses client stores every turn by default: this holds the last 100,000 (hours of a busy
# proxy; a background response is asked for within minutes to hours).
MAX_REMEMBERED = 100_000

_SCOPES = {"responses": 1, "chat": 2}  # the path part after /v1/ -> where its id is


class Origins:
    def __init__(self, max_entries: int = MAX_REMEMBERED) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._max_entries = max_entries
        # In the order made; an OrderedDict drops its oldest in O(1), where a dict's first
        # key is found past the holes its earlier deletions left.
        self._made: OrderedDict[str, UpstreamSettings] = OrderedDict()

    def remember(self, made_id: object, upstream: UpstreamSettings) -> None:
        if made_id.__class__ is not str or not made_id:
            return
        made = self._made
        made[made_id] = upstream  # type: ignore[index]
        if len(made) > self._max_entries:
            made.popitem(last=False)

    def remember_answer(self, answer: object, upstream: UpstreamSettings) -> None:
        """Remember the `id` of an answer's JSON (a chat completion, a response)."""
        if isinstance(answer, dict):
            self.remember(answer.get("id"), upstream)

    def remember_stream(self, prepared: Prepared, tap: object) -> None:
        """Remember the id a stream's first chunk or `response.created` gave, if the upstream
        keeps what it made (called however the relay ended: a client that left a background
        stream resumes it by id)."""
        if isinstance(tap, (ChatTap, ResponsesTap)) and kept_upstream(prepared.inbound):
            self.remember(tap.stream.id, prepared.upstream)

    def upstream_of(self, made_id: str) -> UpstreamSettings | None:
        return self._made.get(made_id)

    def forget(self, made_id: str) -> None:
        self._made.pop(made_id, None)

    def __contains__(self, made_id: object) -> bool:
        return made_id in self._made

    def __len__(self) -> int:
        return len(self._made)


def origins_for(settings: Settings) -> Origins | None:
    """An `Origins` when the routes name more than one upstream; None when every request goes
    to the same one anyway (nothing to remember, and nothing to pay per request)."""
    upstreams = {route.upstream for route in settings.routes}
    return Origins() if len(upstreams) > 1 else None


def kept_upstream(inbound: Inbound) -> bool:
    """The upstream keeps what this request makes, to be asked for by its id later."""
    store = inbound.doc.get("store")
    return store is True if inbound.api is Api.CHAT else store is not False


def scoped_id(tail: str) -> str | None:
    """The id a path after `/v1/` is about (`responses/{id}...`, `chat/completions/{id}...`),
    or None."""
    parts = tail.split("/", 3)
    at = _SCOPES.get(parts[0])
    if at is None or len(parts) <= at or (at == 2 and parts[1] != "completions"):
        return None
    return parts[at] or None
