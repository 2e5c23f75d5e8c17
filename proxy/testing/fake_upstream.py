"""The project's fake OpenAI-compatible upstream: an aiohttp server that tests and demos talk to.

It records every request, enforces the provider rules of its dialect (`rules`), counts prompt
tokens with the reference counter and answers over-long prompts with the overflow error of its
style, reports usage (with a simulated prompt cache) in the chosen provider shape, and answers
with scripted `Reply`s, a responder hook, or a short default text.

    async with FakeUpstream(limits={"small-*": 8000}) as fake:
        fake.script(Reply.tool_calls(call("read_file", {"path": "a.py"})))
        client = AsyncOpenAI(base_url=fake.url, api_key="x")
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from proxy import jsonio
from proxy.lru import LRU
from proxy.testing import (chat_endpoint, conversations, misc_endpoints, responses_endpoint,
                           stored_chat, stored_responses)
from proxy.testing.conversations import Conversation
from proxy.testing.dialects import DIALECTS
from proxy.testing.overflow import OVERFLOW_STYLES
from proxy.testing.prompt_units import PromptUnits, Unit
from proxy.testing.replies import Reply
from proxy.testing.response_store import StoredResponses
from proxy.testing.rules import Rejection
from proxy.testing.signing import DEFAULT_KEY, Signer
from proxy.testing.sse import PEER_GONE, reject
from proxy.testing.stored_items import StoredItems
from proxy.testing.turn import (Ids, Turn, call_ids, capped, completion_tokens, sampled,
                                stream_options)
from proxy.testing.usage import USAGE_STYLES, Counts, PromptCache

DEFAULT_MODEL = "fake-model"
DEFAULT_TEXT = "This is the fake upstream's reply."
DEFAULT_REASONING = "Thinking it through before answering."
_REASONING_DIALECTS = ("deepseek-thinking", "deepseek-r1-legacy", "kimi-thinking", "openrouter")


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names
    body: bytes
    json: Any  # the parsed body, or None when it is not JSON


Responder = Callable[[Recorded], Reply | None]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_RECORDED = web.RequestKey("recorded", Recorded)


class FakeUpstream:
    def __init__(self, *, limits: Mapping[str, int] | None = None, dialect: str = "openai",
                 usage_style: str = "openai", overflow_style: str = "openai",
                 api_key: str | None = None, models: tuple[str, ...] = (),
                 always_reason: bool = False, responses_stream_overflow: str = "event",
                 window_counts_completion: bool = False,
                 chunk_delay: float = 0.0, seed: int = 0, key: bytes = DEFAULT_KEY) -> None:
        _require(dialect, DIALECTS, "dialect")
        _require(usage_style, USAGE_STYLES, "usage_style")
        _require(overflow_style, OVERFLOW_STYLES, "overflow_style")
        _require(responses_stream_overflow, ("event", "http"), "responses_stream_overflow")
        self.limits = dict(limits or {})
        self.dialect, self.usage_style, self.overflow_style = dialect, usage_style, overflow_style
        self.api_key = api_key
        self.extra_models = models
        self.always_reason = always_reason
        self.responses_stream_overflow = responses_stream_overflow
        # A limit is the prompt's by default (what the proxy's `max_input_tokens` means); when
        # it is a total context window, the requested completion must fit in it too, and the
        # providers that say so answer in their own words (PROTOCOL.md §3, `overflow`).
        self.window_counts_completion = window_counts_completion
        self.chunk_delay = chunk_delay
        self.signer = Signer(key)
        self.ids = Ids(seed)
        self.cache = PromptCache()
        self.units = PromptUnits()
        self.requests: list[Recorded] = []
        self.peer_gone: list[str] = []  # streams the client abandoned while the fake held them
        self.responder: Responder | None = None
        self.stored = StoredResponses()  # made with `store` on, per credential
        # (credential, conversation id) -> the conversation made by `POST /v1/conversations`
        self.conversations: LRU[tuple[str, str], Conversation] = LRU(10_000)
        self.items = StoredItems()  # stored answers' output items, for `item_reference`s
        # made with `store: true`, per credential, bounded
        self.stored_chat = stored_chat.new_store()
        self._script: list[Reply] = []
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()
        self.port = 0
        self.host = "127.0.0.1"

    # ------------------------------------------------------------ lifecycle

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._stopping = asyncio.Event()
        self._runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, shutdown_timeout=1.0)
        await site.start()
        self.host = host
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> FakeUpstream:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def stopping(self) -> asyncio.Event:
        return self._stopping

    def app(self) -> web.Application:
        app = web.Application(client_max_size=512 * 1024 * 1024, middlewares=[self._middleware])
        router = app.router
        router.add_post("/v1/chat/completions", lambda r: chat_endpoint.handle(self, r))
        router.add_post("/v1/responses", lambda r: responses_endpoint.handle(self, r))
        router.add_get("/v1/responses/{id}", lambda r: responses_endpoint.retrieve(self, r))
        router.add_delete("/v1/responses/{id}", lambda r: stored_responses.delete(self, r))
        router.add_post("/v1/responses/{id}/cancel", lambda r: stored_responses.cancel(self, r))
        router.add_get("/v1/responses/{id}/input_items",
                       lambda r: stored_responses.input_items(self, r))
        router.add_get("/v1/chat/completions", lambda r: stored_chat.listed(self, r))
        router.add_get("/v1/chat/completions/{id}", lambda r: stored_chat.retrieve(self, r))
        router.add_post("/v1/chat/completions/{id}", lambda r: stored_chat.update(self, r))
        router.add_delete("/v1/chat/completions/{id}", lambda r: stored_chat.delete(self, r))
        router.add_get("/v1/chat/completions/{id}/messages",
                       lambda r: stored_chat.messages(self, r))
        router.add_post("/v1/conversations", lambda r: conversations.create(self, r))
        router.add_get("/v1/conversations/{id}", lambda r: conversations.retrieve(self, r))
        router.add_post("/v1/conversations/{id}", lambda r: conversations.update(self, r))
        router.add_delete("/v1/conversations/{id}", lambda r: conversations.delete(self, r))
        router.add_get("/v1/conversations/{id}/items", lambda r: conversations.items(self, r))
        router.add_delete("/v1/conversations/{id}/items/{item_id}",
                          lambda r: conversations.delete_item(self, r))
        router.add_get("/v1/models", lambda r: misc_endpoints.models(self, r))
        router.add_get("/v1/models/{id}", lambda r: misc_endpoints.model(self, r))
        router.add_post("/v1/embeddings", lambda r: misc_endpoints.embeddings(self, r))
        router.add_route("*", "/{tail:.*}", misc_endpoints.not_found)
        app[PEER_GONE] = self.peer_gone
        return app

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        recorded = await _record(request)
        self.requests.append(recorded)
        request[_RECORDED] = recorded
        denied = misc_endpoints.check_auth(self.api_key, recorded.headers.get("authorization"))
        if denied is not None:
            return reject(denied)
        try:
            return await handler(request)
        except (web.HTTPException, ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - shapes no rule anticipated: a real API says 400
            return reject(Rejection(400, {"error": {
                "message": f"Invalid request: {type(exc).__name__}.", "type": "invalid_request_error",
                "param": None, "code": None}}))

    # ------------------------------------------------------------ what the handlers ask

    def script(self, *replies: Reply) -> None:
        self._script.extend(replies)

    @property
    def scripted(self) -> int:
        """Replies still waiting in the script."""
        return len(self._script)

    def next_reply(self, recorded: Recorded) -> Reply:
        reply = self.responder(recorded) if self.responder is not None else None
        if reply is None and self._script:
            reply = self._script.pop(0)
        reply = reply or Reply.text(DEFAULT_TEXT)
        needs_reasoning = self.always_reason or self.dialect in _REASONING_DIALECTS
        if needs_reasoning and not reply.reasoning and not reply.is_error:
            reply = reply.with_reasoning(DEFAULT_REASONING)
        return reply

    def turn(self, body: Mapping[str, Any], reply: Reply, prompt: int, units: list[Unit],
             credential: str = "", *, samples: int = 1, cap: int = 0) -> Turn:
        """The answer to render: ids assigned, usage counted, the prompt cache of the
        credential consulted. `samples`: the choices asked for (chat's `n`); the usage counts
        the output of all, the prompt once. `cap`: the output tokens the request allows each
        choice (0: no cap), where the model stops."""
        replies = [capped(r, cap)
                   for r in (reply, *(sampled(reply, index) for index in range(1, samples)))]
        counted = [completion_tokens(r) for r in replies]
        completion, reasoning = sum(c for c, _ in counted), sum(r for _, r in counted)
        cached, written = self.cache.lookup(body["model"], units, credential)
        cached = min(cached, prompt)
        counts = Counts(prompt, completion, reasoning, cached, min(written, prompt - cached))
        include_usage, obfuscate = stream_options(body)
        # OpenRouter always ends a stream with usage (PROTOCOL.md §1.3).
        include_usage = include_usage or self.usage_style == "openrouter"
        created = int(time.time())
        first, *others = [Turn(body["model"], r, counts, call_ids(r, self.ids, self.dialect),
                               created, self.dialect, self.usage_style, include_usage,
                               obfuscate) for r in replies]
        return dataclasses.replace(first, more=tuple(others)) if others else first

    def limit_for(self, model: str) -> int | None:
        for pattern, limit in self.limits.items():
            if fnmatch.fnmatchcase(model, pattern):
                return limit
        return None

    def model_names(self) -> list[str]:
        literal = [m for m in self.limits if not any(c in m for c in "*?[")]
        return list(dict.fromkeys([*literal, *self.extra_models, DEFAULT_MODEL]))

    def recorded(self, request: web.Request) -> Recorded:
        return request[_RECORDED]

    def last(self, path: str = "") -> Recorded:
        """The latest recorded request whose path ends with `path`."""
        for recorded in reversed(self.requests):
            if recorded.path.endswith(path):
                return recorded
        raise LookupError(f"no request to a path ending with {path!r}")


def _require(value: str, known: Any, what: str) -> None:
    if value not in known:
        raise ValueError(f"unknown {what} {value!r}; known: {', '.join(known)}")


async def _record(request: web.Request) -> Recorded:
    body = await request.read()
    try:
        parsed = jsonio.loads(body) if body else None  # also what only the RFC allows
    except jsonio.JSONDecodeError:
        parsed = None
    return Recorded(request.method, request.path, dict(request.query),
                    {k.lower(): v for k, v in request.headers.items()}, body, parsed)
