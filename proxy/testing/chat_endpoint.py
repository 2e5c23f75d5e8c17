"""`POST /v1/chat/completions` of the fake: validate, check the window, answer (JSON or SSE).

Order matters and follows a real provider: a request the dialect rejects or that does not fit
the window never reaches the model, so it consumes no scripted reply (a proxy's retry after
compaction gets the reply the test scripted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson
from aiohttp import web

from proxy.testing import integer_options, stored_chat
from proxy.testing.chat_render import chunks, completion, reasoning_fields, wire_calls
from proxy.testing.dialects import DIALECTS
from proxy.testing.integer_options import asked, refused_integer
from proxy.testing.misc_endpoints import parse_body, request_headers
from proxy.testing.overflow import (Size, chat_overflow, exceeds, requested_completion,
                                    silently_truncates)
from proxy.testing.prompt_units import prompt_tokens
from proxy.testing.reference_tokens import tools_tokens
from proxy.testing.rejections import Rejection
from proxy.testing.rules import check_chat
from proxy.testing.sse import DONE, data_frame, reject, send_failure, send_stream
from proxy.testing.stored_items import credential_of
from proxy.testing.turn import Turn

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream


async def handle(fake: FakeUpstream, request: web.Request) -> web.StreamResponse:
    recorded = fake.recorded(request)
    body = parse_body(recorded)
    if isinstance(body, Rejection):
        return reject(body)
    found = check_chat(body, fake.dialect, signer=fake.signer)
    if found is not None:
        return reject(found)
    refused = (refused_integer(body, integer_options.CHAT)
               if DIALECTS[fake.dialect].integer_options else None)
    if refused is not None:
        return reject(refused)
    units = fake.units.chat(body)
    prompt = prompt_tokens(units)
    limit = fake.limit_for(body["model"])
    size = _size(body, prompt, fake.window_counts_completion)
    if limit is not None and exceeds(fake.overflow_style, size, limit):
        if not silently_truncates(fake.overflow_style):
            return reject(chat_overflow(fake.overflow_style, size, limit))
        prompt = limit  # Ollama cuts the prompt's front and says nothing (PROTOCOL.md §3)
    reply = fake.next_reply(recorded)
    if reply.forced_overflow:
        return reject(chat_overflow(fake.overflow_style, prompt, limit or max(1, prompt - 1)))
    if reply.is_error:
        return reject(Rejection(reply.status, reply.body))
    stream = body.get("stream") is True
    if not stream:
        failed = await send_failure(request, reply, fake.stopping, reply.error_frame)
        if failed is not None:
            return failed
    samples = asked(body, "n", integer_options.CHAT, 1)
    turn = fake.turn(body, reply, prompt, units, credential_of(recorded.headers),
                     samples=samples, cap=requested_completion(body))
    return await _answer(fake, request, body, turn, stream)


def _size(body: dict[str, Any], prompt: int, counts_completion: bool) -> Size:
    completion = requested_completion(body) if counts_completion else 0
    return Size(prompt, tools_tokens(body.get("tools")), completion)


async def _answer(fake: FakeUpstream, request: web.Request, body: dict[str, Any], turn: Turn,
                  stream: bool) -> web.StreamResponse:
    first, *more = [(sample, wire_calls(sample, fake.signer, fake.ids),
                     reasoning_fields(sample, fake.signer)) for sample in turn.samples()]
    _, calls, reasoning = first
    completion_id = "chatcmpl-" + fake.ids.alnum(29)
    headers = request_headers(fake)
    payload = completion(turn, completion_id, calls, reasoning, more)
    stored_chat.remember(fake, request.headers, body, payload)
    if not stream:
        return web.Response(body=orjson.dumps(payload), content_type="application/json",
                            headers=headers)
    frames = [data_frame(c) for c in chunks(turn, completion_id, calls, reasoning, fake.ids, more)]
    frames.append(DONE)
    error = data_frame(turn.reply.error_frame) if turn.reply.error_frame is not None else None
    return await send_stream(request, frames, turn.reply, error, fake.stopping, fake.chunk_delay, headers)

