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
"""

from __future__ import annotations

import time
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


def _json(payload: Any) -> web.Response:
    return web.Response(body=jsonio.dumps(payload), content_type="application/json")
