"""Which upstream made each stored response, chat completion and conversation the proxy relayed.

The requests on one of them carry no model: `GET`/`DELETE /v1/responses/{id}`, `POST
/v1/responses/{id}/cancel`, `GET /v1/responses/{id}/input_items`, the stored chat
completions' `GET`/`POST`/`DELETE /v1/chat/completions/{id}` and `GET .../{id}/messages`, and
`GET`/`POST`/`DELETE /v1/conversations/{id}[/items[/{item_id}]]`. Routed by model they would
all go where model "" goes, while the id lives on the one upstream that made it. So would a
Responses request that continues one by `previous_response_id` or `conversation` when its
model's route names another upstream, which knows nothing of the id. The pipeline sees every
answer it relays (a body's `id`, a stream's first chunk or `response.created`), and the
pass-through the answer to `POST /v1/conversations`, so they remember id -> upstream here, and
the requests that name an id ask.

Only what the upstream keeps is remembered: a chat completion made with `store: true`, a
response not made with `store: false`, a conversation; in memory, bounded (the oldest go
first). The ones a client asks for by id by design, background responses, stored chat
completions and conversations, are also written to the state store (a queued write), so a
restart does not lose them; the store keeps a row 30 days, a conversation's from its last use
by a Responses request (OpenAI keeps conversations without the 30 days responses get). A
store shared by several instances (Redis) gets every kept answer, plain stored responses too:
the next turn of a `previous_response_id` chain may reach another instance, which has only the
store to ask (a key with a TTL each, written in the batch of the answer's other writes; SQLite,
one process, keeps them in memory only, where a row each would grow the file for nothing).
There the write is awaited (`proxy/server/shared_waits.py`) before the answer's end goes out: an
agent's next turn, at another instance at once, would otherwise be routed by its model before
the write landed (one turn in a hundred, measured, with a client that answers at once). An id
pushed out of the memory (a plain stored response, one instance) goes by the route of model
"" (or of the request's model).
"""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from proxy import jsonio
from proxy.conversation import Api
from proxy.inbound import Inbound
from proxy.server.prepared import Prepared
from proxy.server.shared_waits import within
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.settings import Settings, UpstreamSettings
from proxy.store import StateStore
from proxy.store.failures import describe

# About 190 bytes each (the id's string and its entry, measured): some 19 MB when full. A
# Responses client stores every turn by default: this holds the last 100,000 (hours of a busy
# proxy; a background response is asked for within minutes to hours).
MAX_REMEMBERED = 100_000

# the path part after /v1/ -> where its id is
_SCOPES = {"responses": 1, "chat": 2, "conversations": 1}
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
            await self._made_by(prepared.upstream, answer_id(data), asked_by_id(prepared.inbound),
                                prepared)

    async def stream_made(self, prepared: Prepared, tap: object) -> None:
        """Remember the id a stream's first chunk or `response.created` gave, if the upstream
        keeps what it made (called however the relay ended: a client that left a background
        stream resumes it by id)."""
        if isinstance(tap, (ChatTap, ResponsesTap)) and kept_upstream(prepared.inbound):
            await self._made_by(prepared.upstream, tap.stream.id, asked_by_id(prepared.inbound),
                                prepared)

    async def conversation_made(self, upstream: UpstreamSettings, data: bytes) -> None:
        """Remember the conversation an answer to `POST /v1/conversations` made (it is only
        ever used by its id: stored too)."""
        await self._made_by(upstream, answer_id(data), True)

    async def conversation_used(self, made_id: str, upstream: UpstreamSettings) -> None:
        """A Responses request continued the conversation `made_id` on `upstream`. OpenAI keeps
        a conversation without the 30 days a response gets: its stored row is written anew (it
        ages out 30 days after its last use, not its making), and the memory holds it as new."""
        self._made.pop(made_id, None)
        await self._made_by(upstream, made_id, True)

    def reconfigured(self, upstreams: Mapping[str, UpstreamSettings]) -> Origins:
        """The same memory, for a reloaded config's `upstreams`: an id goes to its upstream by
        name (a changed one's new base_url and key; a removed one's ids go by route)."""
        again = copy.copy(self)
        again._upstreams = upstreams
        return again

    async def upstream_of(self, made_id: str) -> UpstreamSettings | None:
        found = self._made.get(made_id)
        if found is not None:
            return self._upstreams.get(found.name)  # a reload may have changed or removed it
        if self._store is None:
            return None
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

    async def _made_by(self, upstream: UpstreamSettings, made_id: object, stored: bool,
                       prepared: Prepared | None = None) -> None:
        if not isinstance(made_id, str) or not made_id:
            return
        self.remember(made_id, upstream)
        if self._store is None or not (stored or self._store.shared):
            return
        try:
            await self._store.add_origin(made_id, upstream.name, self._clock())
            if self._store.shared:  # another instance may be asked for it next: in the store
                async with within(prepared):  # the answer's one deadline
                    await self._store.origin_written(made_id)  # not other writes queued
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
    """The id a path after `/v1/` is about (`responses/{id}...`, `chat/completions/{id}...`,
    `conversations/{id}...`), or None."""
    parts = tail.split("/", 3)
    at = _SCOPES.get(parts[0])
    if at is None or len(parts) <= at or (at == 2 and parts[1] != "completions"):
        return None
    return parts[at] or None


def names_the_object(tail: str) -> bool:
    """The path is the stored object itself (`conversations/{id}`), not a part of it
    (`conversations/{id}/items/{item_id}`): a delete there deletes what the id names."""
    parts = tail.split("/")
    return _SCOPES.get(parts[0]) == len(parts) - 1


def continued_id(doc: Mapping[str, Any]) -> str | None:
    """The id a Responses request continues upstream: its `previous_response_id`, else its
    `conversation` (an id, or `{"id": ...}`); None when it names neither as a string."""
    held = doc.get("previous_response_id") or doc.get("conversation")
    if isinstance(held, dict):
        held = held.get("id")
    return held if isinstance(held, str) and held else None
