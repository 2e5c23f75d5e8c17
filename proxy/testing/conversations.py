"""`/v1/conversations` of the fake: a conversation exists once it is created.

A Responses request naming a `conversation` continues that conversation's items upstream and
appends its input and output to them (`responses_endpoint`). OpenAI does not make one for an id
it has not issued: the request is a 404, `Conversation with id '<id>' not found.`
(`invalid_request_error`, null `param` and `code`) [OBS 3P: a table of direct-API probes
(2026-08-30) and a cURL report on the Responses API (2025-10-27) give the same text, the probes
the status; a retrieve or delete of an unknown or deleted conversation answers the same text].
Conversations are kept per credential as stored responses are: another key's is unknown to it
[MEM: taken to be scoped to the project as responses are; not verified].
Created with optional `items` (kept as sent, the conversation's first items) and `metadata`.
`POST /v1/conversations/{id}` replaces its metadata; `GET .../items` lists its items (all on one
page, `order` as asked, newest first by default [SRC openai-python `item_list_params.py`]) and
`DELETE .../items/{item_id}` deletes one, answering the conversation. An item kept without an id is listed with one made
from the conversation, its content and its occurrence [the fake's own: stable while other items
are deleted; OpenAI's own ids are not verified], and is deleted by that id; a message is listed
with its type and its text content as `input_text` parts, as `input_items` lists them.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy import jsonio
from proxy.testing import rejections
from proxy.testing.rejections import Rejection
from proxy.testing.sse import reject
from proxy.testing.stored_items import credential_of

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream


@dataclass
class Conversation:
    id: str
    created_at: int
    metadata: dict[str, Any]
    items: list[Any] = field(default_factory=list)

    def resource(self) -> dict[str, Any]:
        return {"id": self.id, "object": "conversation", "created_at": self.created_at,
                "metadata": self.metadata}


def unknown(conversation_id: str) -> Rejection:
    return rejections.openai(f"Conversation with id '{conversation_id}' not found.", status=404)


async def create(fake: FakeUpstream, request: web.Request) -> web.Response:
    body = fake.recorded(request).json
    body = body if isinstance(body, dict) else {} if body is None else {"items": body}
    items, metadata = body.get("items") or [], body.get("metadata") or {}
    if not isinstance(items, list) or not isinstance(metadata, dict):
        # OpenAI's text for a malformed create is not recorded: the fake's own wording.
        return reject(rejections.openai("Fake upstream's own wording: a conversation is created "
                                        "from a JSON object with an `items` list and a "
                                        "`metadata` object."))
    conversation = Conversation("conv_" + fake.ids.hex(48), int(time.time()), metadata, list(items))
    fake.conversations.put((credential_of(request.headers), conversation.id), conversation)
    return _json(conversation.resource())


async def retrieve(fake: FakeUpstream, request: web.Request) -> web.Response:
    conversation_id = request.match_info["id"]
    held = fake.conversations.get((credential_of(request.headers), conversation_id))
    return reject(unknown(conversation_id)) if held is None else _json(held.resource())


async def delete(fake: FakeUpstream, request: web.Request) -> web.Response:
    conversation_id = request.match_info["id"]
    held = fake.conversations.pop((credential_of(request.headers), conversation_id))
    if held is None:
        return reject(unknown(conversation_id))
    return _json({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


async def update(fake: FakeUpstream, request: web.Request) -> web.Response:
    conversation_id = request.match_info["id"]
    held = fake.conversations.get((credential_of(request.headers), conversation_id))
    if held is None:
        return reject(unknown(conversation_id))
    body = fake.recorded(request).json
    metadata = body.get("metadata") if isinstance(body, dict) else None
    if not isinstance(metadata, dict):
        return reject(rejections.openai("Fake upstream's own wording: a conversation is updated "
                                        "with a `metadata` object."))
    held.metadata = metadata
    return _json(held.resource())


async def items(fake: FakeUpstream, request: web.Request) -> web.Response:
    conversation_id = request.match_info["id"]
    held = fake.conversations.get((credential_of(request.headers), conversation_id))
    if held is None:
        return reject(unknown(conversation_id))
    listed = _listed(held)
    if request.query.get("order", "desc") != "asc":
        listed.reverse()
    ids = [item.get("id") if isinstance(item, dict) else None for item in listed]
    return _json({"object": "list", "data": listed, "has_more": False,
                  "first_id": ids[0] if ids else None, "last_id": ids[-1] if ids else None})


async def delete_item(fake: FakeUpstream, request: web.Request) -> web.Response:
    conversation_id, item_id = request.match_info["id"], request.match_info["item_id"]
    held = fake.conversations.get((credential_of(request.headers), conversation_id))
    if held is None:
        return reject(unknown(conversation_id))
    ids = [item.get("id") if isinstance(item, dict) else None for item in _listed(held)]
    if item_id not in ids:
        # [MEM] the wording OpenAI gives an unknown item elsewhere (PROTOCOL.md §2.3)
        return reject(rejections.openai(f"Item with id '{item_id}' not found.", status=404))
    del held.items[ids.index(item_id)]
    return _json(held.resource())


def _listed(conversation: Conversation) -> list[Any]:
    """The conversation's items in order, each with an id."""
    seen: Counter[bytes] = Counter()
    listed = []
    for item in conversation.items:
        if not isinstance(item, dict) or isinstance(item.get("id"), str):
            listed.append(item)
            continue
        content = jsonio.dumps(item)
        seen[content] += 1
        digest = hashlib.blake2b(b"\0".join((conversation.id.encode(), content,
                                             str(seen[content]).encode())), digest_size=24)
        kind = item.get("type", "message")
        shown = {"type": kind, **item, "id": ("msg_" if kind == "message" else "item_")
                 + digest.hexdigest(), "status": "completed"}
        if isinstance(item.get("content"), str):  # as input_text parts, as the API lists them
            shown["content"] = [{"type": "input_text", "text": item["content"]}]
        listed.append(shown)
    return listed


def _json(payload: Any) -> web.Response:
    return web.Response(body=jsonio.dumps(payload), content_type="application/json")
