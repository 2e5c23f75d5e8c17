"""Which upstream made each stored response and stored chat completion the proxy relayed.

The requests on one of them carry no model: `GET`/`DELETE /v1/responses/{id}`, `POST
/v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`, and the stored chat
completions' `GET`/`POST`/`DELETE /v1/chat/completions/{id}` and `GET .../{id}/messages`.
Routed by model they would all go where model "" goes, while the id lives on the one upstream
that made it. The pipeline sees every answer it relays (a body's `id`, a stream's first chunk
or `response.created`), so it remembers id -> upstream here, and the pass-through asks.

Only what the upstream keeps is remembered: a chat completion made with `store: true`, a
response not made with `store: false`; in memory, bounded (the oldest go first). The ones a
client asks for by id by design, background responses and stored chat completions, are also
written to the state store (a queued write), so a restart does not lose them. An id made by
another instance, or pushed out of the memory (a plain stored response), goes by the route of
model "" as before.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from proxy import jsonio
from proxy.conversation import Api
from proxy.inbound import Inbound
from proxy.server.prepared import Prepared
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.settings import Settings, UpstreamSettings
from proxy.store import StateStore
from proxy.store.failures import describe

# About 190 bytes each (the id's string and its entry, measured): some 19 MB when full. A
# Responses client stores every turn by default: this holds the last 100,000 (hours of a busy
# proxy; a background response is asked for within minutes to hours).
MAX_REMEMBERED = 100_000

_SCOPES = {"responses": 1, "chat": 2}  # the path part after /v1/ -> where its id is
# `{"id": "...",` at the start of a body, compact or indented; an id with an escape (or
# another character no provider uses) is left to the parser.
_LEADING_ID = re.compile(rb'\A\s*\{\s*"id"\s*:\s*"([A-Za-z0-9_.:-]{1,256})"')


class Origins:
    def __init__(self, upstreams: Mapping[str, UpstreamSettings], store: StateStore | None,
                 clock: Callable[[], float], log: Any = None,
                 max_entries: int = MAX_REMEMBERED) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be positive")
        self._upstreams = upstreams
        self._store = store
        self._clock = clock
        self._log = log
        self._max_entries = max_entries
        # In the order made; an OrderedDict drops its oldest in O(1), where a dict's first
        # key is found past the holes its earlier deletions left.
        self._made: OrderedDict[str, UpstreamSettings] = OrderedDict()

    async def answer_made(self, prepared: Prepared, data: bytes) -> None:
        """Remember the `id` of an answer's JSON body (a chat completion, a response), if the
        upstream keeps what it made."""
        if kept_upstream(prepared.inbound):
            await self._made_by(prepared, answer_id(data))

    async def stream_made(self, prepared: Prepared, tap: object) -> None:
        """Remember the id a stream's first chunk or `response.created` gave, if the upstream
        keeps what it made (called however the relay ended: a client that left a background
        stream resumes it by id)."""
        if isinstance(tap, (ChatTap, ResponsesTap)) and kept_upstream(prepared.inbound):
            await self._made_by(prepared, tap.stream.id)

    async def upstream_of(self, made_id: str) -> UpstreamSettings | None:
        found = self._made.get(made_id)
        if found is not None or self._store is None:
            return found
        try:
            name = await self._store.origin(made_id)
        except Exception as error:  # noqa: BLE001 - unknown then: the route of model "" decides
            self._warn("origin_not_read", error)
            return None
        found = self._upstreams.get(name) if name is not None else None  # a renamed one: None
        if found is not None:
            self.remember(made_id, found)
        return found

    def remember(self, made_id: str, upstream: UpstreamSettings) -> None:
        made = self._made
        made[made_id] = upstream
        if len(made) > self._max_entries:
            made.popitem(last=False)

    def forget(self, made_id: str) -> None:
        """Out of the memory (after a delete); the store's row ages out."""
        self._made.pop(made_id, None)

    def __contains__(self, made_id: object) -> bool:
        return made_id in self._made

    def __len__(self) -> int:
        return len(self._made)

    async def _made_by(self, prepared: Prepared, made_id: object) -> None:
        if not isinstance(made_id, str) or not made_id:
            return
        upstream = prepared.upstream
        self.remember(made_id, upstream)
        if self._store is None or not asked_by_id(prepared.inbound):
            return
        try:
            await self._store.add_origin(made_id, upstream.name, self._clock())
        except Exception as error:  # noqa: BLE001 - as a lost anchor: the answer stands
            self._warn("origin_not_recorded", error)

    def _warn(self, event: str, error: Exception) -> None:
        if self._log is not None:
            self._log.warning(event, **describe(error))


def origins_for(settings: Settings, store: StateStore | None, clock: Callable[[], float],
                log: Any = None) -> Origins | None:
    """An `Origins` when the routes name more than one upstream; None when every request goes
    to the same one anyway (nothing to remember, and nothing to pay per request)."""
    upstreams = {route.upstream for route in settings.routes}
    return Origins(settings.upstreams, store, clock, log) if len(upstreams) > 1 else None


def kept_upstream(inbound: Inbound) -> bool:
    """The upstream keeps what this request makes, to be asked for by its id later."""
    store = inbound.doc.get("store")
    return store is True if inbound.api is Api.CHAT else store is not False


def asked_by_id(inbound: Inbound) -> bool:
    """What this request makes is asked for by its id by design: a background response (polled
    until it ends), a stored chat completion (there is no other way to use one). A plain stored
    response is continued with `previous_response_id`, which has a model to route by."""
    if inbound.api is Api.CHAT:
        return True  # only called for kept answers: `store: true`
    return inbound.doc.get("background") is True


def answer_id(data: bytes) -> str | None:
    """The `id` of a JSON answer. Providers write it first: read there without parsing the
    whole body (the pipeline parses it on its own); parsed only when it is not there."""
    found = _LEADING_ID.match(data)
    if found is not None:
        return found.group(1).decode()
    try:
        answer = jsonio.loads(data)
    except ValueError:
        return None
    made_id = answer.get("id") if isinstance(answer, dict) else None
    return made_id if isinstance(made_id, str) else None


def scoped_id(tail: str) -> str | None:
    """The id a path after `/v1/` is about (`responses/{id}...`, `chat/completions/{id}...`),
    or None."""
    parts = tail.split("/", 3)
    at = _SCOPES.get(parts[0])
    if at is None or len(parts) <= at or (at == 2 and parts[1] != "completions"):
        return None
    return parts[at] or None
