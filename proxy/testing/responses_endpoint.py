"""`POST /v1/responses` and `GET /v1/responses/{id}` of the fake (PROTOCOL.md §2.3, §6).

Stored responses (`store` is true by default) are kept per credential (`response_store`) with
their whole item chain, so a later request of that credential with `previous_response_id` is
validated, counted and cached as the full conversation it continues, and its encrypted reasoning
is bound to that full history. Their output items are
kept per credential too (`stored_items`): a later `item_reference` to one is validated, counted
and continued as that item, one to an item the fake does not hold is OpenAI's 404. A request
naming a `conversation` (an id, or `{"id": ...}`) continues that conversation's items the same
way and appends its input and output to it; it must have been made by `POST /v1/conversations`
under that credential, else the request is OpenAI's 404 (`conversations`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aiohttp import web

from proxy import jsonio
from proxy.testing import integer_options, rejections
from proxy.testing.conversations import unknown as unknown_conversation
from proxy.testing.integer_options import asked, refused_integer
from proxy.testing.misc_endpoints import parse_body, request_headers
from proxy.testing.overflow import responses_overflow
from proxy.testing.prompt_units import Unit, prompt_tokens, truncated_front
from proxy.testing.rejections import Rejection
from proxy.testing.replies import Reply
from proxy.testing.response_store import Stored
from proxy.testing.responses_render import (
    events,
    options_of,
    output_items,
    overflow_events,
    response_object,
)
from proxy.testing.rules import check_responses_input
from proxy.testing.sse import event_frame, reject, send_failure, send_stream
from proxy.testing.stored_items import credential_of
from proxy.testing.turn import Turn

if TYPE_CHECKING:
    from proxy.testing.fake_upstream import FakeUpstream


_NOTHING = Reply.text("")


async def handle(fake: FakeUpstream, request: web.Request) -> web.StreamResponse:
    recorded = fake.recorded(request)
    body = parse_body(recorded)
    if isinstance(body, Rejection):
        return reject(body)
    credential = credential_of(recorded.headers)
    prior = _prior(fake, body, credential)
    if isinstance(prior, Rejection):
        return reject(prior)
    checked = check_responses_input(body, verify_encrypted=fake.signer.encrypted_valid,
                                    prior=prior, signer=fake.signer,
                                    resolve=fake.items.resolver(credential))
    if isinstance(checked, Rejection):
        return reject(checked)
    refused = refused_integer(body, integer_options.RESPONSES)
    if refused is not None:
        return reject(refused)
    body = _expanded(body, checked)
    limit = fake.limit_for(body["model"])
    units = _units(fake, body, prior, limit)
    prompt = prompt_tokens(units)
    stream = body.get("stream") is True
    if limit is not None and prompt > limit:
        return await _overflow(fake, request, body, prompt, stream)
    reply = fake.next_reply(recorded)
    if reply.forced_overflow:
        return await _overflow(fake, request, body, prompt, stream)
    if reply.is_error:
        return reject(Rejection(reply.status, reply.body))
    if not stream:
        failed = await send_failure(request, reply, fake.stopping, reply.error_frame)
        if failed is not None:
            return failed
    chain = [*prior, *checked]
    cap = asked(body, "max_output_tokens", integer_options.RESPONSES, 0)
    turn = fake.turn(body, reply, prompt, units, credential, cap=cap)
    return await _answer(fake, request, body, turn, chain, stream, credential)


def _units(fake: FakeUpstream, body: dict[str, Any], prior: list[Any],
           limit: int | None) -> list[Unit]:
    """The prompt as upstream reads it; with `truncation: "auto"` the oldest items of an
    over-long one dropped (PROTOCOL.md §6.1), which the usage and the prompt cache see too."""
    head = fake.units.responses_head(body)
    units = head + fake.units.responses_items(body, prior)
    if limit is None or body.get("truncation") != "auto":
        return units
    return truncated_front(units, len(head), limit)


def _expanded(body: dict[str, Any], checked: list[Any]) -> dict[str, Any]:
    """The body with the checked input (its references replaced by the stored items), as
    upstream counts and continues it; a string input stays as sent."""
    return {**body, "input": checked} if isinstance(body.get("input"), list) else body


def conversation_id(body: dict[str, Any]) -> str | None:
    conversation = body.get("conversation")
    if isinstance(conversation, dict):
        conversation = conversation.get("id")
    return conversation if isinstance(conversation, str) else None


async def _answer(fake: FakeUpstream, request: web.Request, body: dict[str, Any], turn: Turn,
                  chain: list[Any], stream: bool, credential: str) -> web.StreamResponse:
    output = output_items(turn, chain, options_of(body), fake.signer, fake.ids)
    response_id = "resp_" + fake.ids.hex(48)
    response = response_object(turn, body, response_id, output)
    if body.get("store") is not False:
        fake.stored.put(credential, response_id, Stored([*chain, *output], response))
        fake.items.remember(credential, output)
    conversation = fake.conversations.get((credential, conversation_id(body) or ""))
    if conversation is not None:
        conversation.items = [*chain, *output]
    if not stream:
        return web.Response(body=jsonio.dumps(response), content_type="application/json",
                            headers=request_headers(fake))
    frames = [event_frame(kind, data) for kind, data in events(turn, body, response_id, output, fake.ids)]
    reply = turn.reply
    error = (_error_event(reply.error_frame, min(reply.error_after or 0, len(frames)))
             if reply.error_frame is not None else None)
    return await send_stream(request, frames, reply, error, fake.stopping, fake.chunk_delay,
                             request_headers(fake))


def _prior(fake: FakeUpstream, body: dict[str, Any], credential: str) -> list[Any] | Rejection:
    previous = body.get("previous_response_id")
    if previous is not None and body.get("conversation") is not None:
        return both_histories()
    if previous is None:
        conversation = conversation_id(body)
        if conversation is None:
            return []
        held = fake.conversations.get((credential, conversation))
        return unknown_conversation(conversation) if held is None else list(held.items)
    stored = fake.stored.get(credential, previous)
    # [OBS] text, code and status 400 (Soju06/codex-lb#853); another key's: `response_store`
    if stored is None:
        return rejections.openai(f"Previous response with id '{previous}' not found.",
                                 param="previous_response_id", code="previous_response_not_found")
    return stored.chain


def both_histories() -> Rejection:
    """PROTOCOL.md §6.1: `previous_response_id` "cannot be used in conjunction with
    `conversation`" [SRC]; checked before either is looked up. Text, code and null param
    [3P]: as OpenAI-compatible servers that mirror OpenAI spell it (SGLang's gateway,
    praxis-proxy); no payload observed from OpenAI itself was found."""
    return rejections.openai("Mutually exclusive parameters. Ensure you are only providing one "
                             "of: 'previous_response_id' or 'conversation'.",
                             code="mutually_exclusive_parameters")


async def _overflow(fake: FakeUpstream, request: web.Request, body: dict[str, Any], prompt: int,
                    stream: bool) -> web.StreamResponse:
    if not stream or fake.responses_stream_overflow == "http":
        return reject(responses_overflow())
    turn = fake.turn(body, _NOTHING, prompt, [])
    frames = [event_frame(kind, data) for kind, data in
              overflow_events(turn, body, "resp_" + fake.ids.hex(48))]
    return await send_stream(request, frames, _NOTHING, None, fake.stopping)


def _error_event(frame: Any, sent: int) -> bytes:
    """The error event after `sent` frames: numbered next, the stream's numbers having no gap
    (an error asked for after more frames than the answer has comes after all of them)."""
    error = frame.get("error", frame) if isinstance(frame, dict) else frame
    return event_frame("error", {"type": "error", "sequence_number": sent, "error": error})


async def retrieve(fake: FakeUpstream, request: web.Request) -> web.Response:
    response_id = request.match_info["id"]
    stored = fake.stored.get(credential_of(request.headers), response_id)
    if stored is None:  # [OBS] text and status (community.openai.com, a stored response's GET)
        return reject(rejections.openai(f"Response with id '{response_id}' not found.",
                                        status=404))
    return web.Response(body=jsonio.dumps(stored.response), content_type="application/json")
