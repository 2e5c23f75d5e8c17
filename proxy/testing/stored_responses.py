"""The fake's endpoints on one stored response: delete, cancel and its input items.

`GET /v1/responses/{id}` is `responses_endpoint.retrieve`. Each answers only the credential
that made the response (`response_store`), another one as for an unknown id. The fake answers a `background`
request at once, so a stored background response has already ended when a client cancels it:
cancelling an ended response returns it unchanged [MEM: OpenAI's background guide says a second
cancel returns the final response; what a cancel after completion answers is not verified].
A cancel refused for a response made without `background` follows the SDKs' docstring ("Only
responses created with the `background` parameter set to `true` can be cancelled." [SRC]); the
answer's own text, status and code, and the other errors', are [MEM: not found in public
reports, see PROTOCOL.md §9], except the unknown id's text and 404 [OBS, `responses_endpoint`].
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy import jsonio
from proxy.testing import rejections
from proxy.testing.sse import reject
from proxy.testing.stored_items import credential_of

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream
    from proxy.testing.response_store import Stored

_RUNNING = ("queued", "in_progress")


async def delete(fake: FakeUpstream, request: web.Request) -> web.Response:
    response_id = request.match_info["id"]
    credential = credential_of(request.headers)
    stored = fake.stored.pop(credential, response_id)
    if stored is None:
        return _not_found(response_id)
    # Its items go with it [MEM: a deleted response's items are taken as no longer referable].
    fake.items.forget(credential, stored.response.get("output") or ())
    # OpenAI's reference gives "response.deleted"; Azure's documents "response".
    return _json({"id": response_id, "object": "response.deleted", "deleted": True})


async def cancel(fake: FakeUpstream, request: web.Request) -> web.Response:
    response_id = request.match_info["id"]
    stored = fake.stored.get(credential_of(request.headers), response_id)
    if stored is None:
        return _not_found(response_id)
    if stored.response.get("background") is not True:
        return reject(rejections.openai("Only responses created with background=true can be "
                                        "cancelled.", status=400))
    if stored.response.get("status") in _RUNNING:
        stored.response["status"] = "cancelled"
    return _json(stored.response)


async def input_items(fake: FakeUpstream, request: web.Request) -> web.Response:
    """The items the response was made from (its chain before its output), newest first unless
    `order=asc`, each with an id as the API gives every stored item, a page of `limit` (default
    20 [DOC openapi]) after the item `after` names, as the SDK's auto-paging list asks them."""
    response_id = request.match_info["id"]
    stored = fake.stored.get(credential_of(request.headers), response_id)
    if stored is None:
        return _not_found(response_id)
    items = [_with_id(response_id, i, item) for i, item in enumerate(_inputs(stored))]
    if request.query.get("order", "desc") != "asc":
        items.reverse()
    page, has_more = _page(items, request.query.get("after"), int(request.query.get("limit", 20)))
    return _json({"object": "list", "data": page, "has_more": has_more,
                  "first_id": page[0]["id"] if page else None,
                  "last_id": page[-1]["id"] if page else None})


def _page(items: list[Any], after: str | None, limit: int) -> tuple[list[Any], bool]:
    # An `after` the list does not hold gives an empty page [MEM: OpenAI's answer not verified].
    ids = [item.get("id") if isinstance(item, dict) else None for item in items]
    if after is None:
        start = 0
    else:
        start = ids.index(after) + 1 if after in ids else len(items)
    return items[start:start + limit], start + limit < len(items)


def _inputs(stored: Stored) -> list[Any]:
    made = len(stored.response.get("output") or ())
    return stored.chain[:len(stored.chain) - made]


def _with_id(response_id: str, index: int, item: Any) -> Any:
    if not isinstance(item, dict) or isinstance(item.get("id"), str):
        return item
    digest = hashlib.blake2b(f"{response_id}:{index}".encode(), digest_size=24).hexdigest()
    prefix = "msg_" if item.get("type", "message") == "message" else "item_"
    listed = {**item, "id": prefix + digest, "status": "completed"}
    if isinstance(item.get("content"), str):  # listed as input_text parts, as the API lists them
        listed["content"] = [{"type": "input_text", "text": item["content"]}]
    return listed


def _not_found(response_id: str) -> web.Response:
    return reject(rejections.openai(f"Response with id '{response_id}' not found.", status=404))


def _json(payload: Any) -> web.Response:
    return web.Response(body=jsonio.dumps(payload), content_type="application/json")
