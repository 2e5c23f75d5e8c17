"""The proxy's own answer to `/compact`, in the shape the request asked for (JSON or SSE)."""

from __future__ import annotations

import hashlib
import time

from aiohttp import web

from proxy import jsonio
from proxy.compaction import manual
from proxy.conversation import Api
from proxy.inbound import Inbound
from proxy.server.prepared import Prepared
from proxy.server.request_line import RequestLine


def answer(inbound: Inbound, text: str, seed: str, headers: dict[str, str]) -> web.Response:
    created = int(time.time())
    # The request's bytes too: the same request sent again (a client's retry) is answered with
    # the same ids, any other one (a repeated `/compact`, which the seed alone cannot tell from
    # the first: the exchanges are left out of the thread's list) with ids of its own.
    request = hashlib.blake2b(inbound.body, digest_size=12).hexdigest()
    ids = manual.synthetic_ids(f"{seed}\0{request}")
    model = inbound.model
    if inbound.api is Api.CHAT and inbound.stream:
        body = manual.chat_stream(text, model=model, created=created, completion_id=ids.completion,
                                  include_usage=manual.include_usage(inbound.doc),
                                  choices=manual.choice_count(inbound.doc))
        return _sse(body, headers)
    if inbound.api is Api.CHAT:
        doc = manual.chat_completion(text, model=model, created=created,
                                     completion_id=ids.completion,
                                     choices=manual.choice_count(inbound.doc))
        return _json(jsonio.dumps(doc), headers)
    if inbound.stream:
        return _sse(manual.response_stream(text, model=model, created=created, ids=ids,
                                           doc=inbound.doc), headers)
    doc = manual.response_object(text, model=model, created=created, ids=ids, doc=inbound.doc)
    return _json(jsonio.dumps(doc), headers)


def stateless(prepared: Prepared, line: RequestLine, text: str, note: str) -> Prepared:
    """`prepared` answered with `text`: a `/compact` with no thread state to compact."""
    seed = f"{prepared.identity.tenant}\0\0{len(prepared.inbound.entries or ())}"
    prepared.answer = answer(prepared.inbound, text, seed, {"x-compaction": "none"})
    line.set(manual_compact=True, compaction="none", note=note)
    prepared.response_headers = {"x-compaction": "none"}
    return prepared


def _json(body: bytes, headers: dict[str, str]) -> web.Response:
    return web.Response(status=200, body=body, content_type="application/json", headers=headers)


def _sse(body: bytes, headers: dict[str, str]) -> web.Response:
    return web.Response(status=200, body=body, headers={
        **headers, "Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
