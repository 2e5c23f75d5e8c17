"""The fake's stored chat completions: those made with `store: true`, and their endpoints.

List (`GET /v1/chat/completions`, filtered by `model` and `metadata[key]`), retrieve, update
its `metadata` (`POST`), delete, and list the messages it was made from. Pages are whole
(`has_more` false). Texts and codes of the errors are [MEM: not re-verified this session, see
PROTOCOL.md §9].

A stored completion belongs to the credential that made it (`stored_items.credential_of`, the
bearer token standing for the key's project), as stored responses do (`response_store`):
another key's list leaves it out and its id is unknown to it [inferred, as there]. At most
`MAX_STORED` are kept, the oldest dropped first: the list is in the order they were made.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy import jsonio
from proxy.testing import rejections
from proxy.testing.sse import reject
from proxy.testing.stored_items import credential_of

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream


MAX_STORED = 10_000


@dataclass
class StoredChat:
    messages: list[Any]  # the request's messages
    completion: dict[str, Any]
    credential: str = ""  # the key that made it: only its requests see it


def new_store() -> OrderedDict[str, StoredChat]:
    return OrderedDict()


def remember(fake: FakeUpstream, headers: Mapping[str, str], body: dict[str, Any],
             completion: dict[str, Any]) -> None:
    """Keep a completion its request asked to store (a stream's too, as one object)."""
    if body.get("store") is True:
        messages = body.get("messages")
        kept = {**completion, "metadata": body.get("metadata") or {}}
        fake.stored_chat[completion["id"]] = StoredChat(
            list(messages) if isinstance(messages, list) else [], kept, credential_of(headers))
        while len(fake.stored_chat) > MAX_STORED:
            fake.stored_chat.popitem(last=False)


async def listed(fake: FakeUpstream, request: web.Request) -> web.Response:
    query = request.query
    model = query.get("model")
    wanted = {k[9:-1]: v for k, v in query.items() if k.startswith("metadata[") and k.endswith("]")}
    credential = credential_of(request.headers)
    found = [s.completion for s in fake.stored_chat.values()
             if s.credential == credential and (model is None or s.completion.get("model") == model)
             and all(s.completion["metadata"].get(k) == v for k, v in wanted.items())]
    if query.get("order", "asc") == "desc":
        found.reverse()
    return _page(found)


async def retrieve(fake: FakeUpstream, request: web.Request) -> web.Response:
    stored = _stored(fake, request)
    return stored if isinstance(stored, web.Response) else _json(stored.completion)


async def update(fake: FakeUpstream, request: web.Request) -> web.Response:
    stored = _stored(fake, request)
    if isinstance(stored, web.Response):
        return stored
    body = fake.recorded(request).json
    metadata = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(metadata, dict):
        return reject(rejections.openai("'metadata' is a required property", param="metadata"))
    stored.completion["metadata"] = metadata
    return _json(stored.completion)


async def delete(fake: FakeUpstream, request: web.Request) -> web.Response:
    stored = _stored(fake, request)
    if isinstance(stored, web.Response):
        return stored
    completion_id = stored.completion["id"]
    del fake.stored_chat[completion_id]
    return _json({"object": "chat.completion.deleted", "id": completion_id, "deleted": True})


async def messages(fake: FakeUpstream, request: web.Request) -> web.Response:
    stored = _stored(fake, request)
    if isinstance(stored, web.Response):
        return stored
    completion_id = stored.completion["id"]
    listed_messages = [{**m, "id": f"{completion_id}-{i}"} if isinstance(m, dict) else m
                       for i, m in enumerate(stored.messages)]
    if request.query.get("order", "asc") == "desc":
        listed_messages.reverse()
    return _page(listed_messages)


def _stored(fake: FakeUpstream, request: web.Request) -> StoredChat | web.Response:
    completion_id = request.match_info["id"]
    stored = fake.stored_chat.get(completion_id)
    if stored is None or stored.credential != credential_of(request.headers):
        return reject(rejections.openai(f"Chat completion with id '{completion_id}' not found.",
                                        status=404))
    return stored


def _page(data: list[Any]) -> web.Response:
    ids = [d.get("id") for d in data if isinstance(d, dict)]
    return _json({"object": "list", "data": data, "has_more": False,
                  "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None})


def _json(payload: Any) -> web.Response:
    return web.Response(body=jsonio.dumps(payload), content_type="application/json")
