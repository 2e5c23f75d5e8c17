"""The request pipeline: from the client's request to the projection sent upstream, and back.

`prepare` is the recipe run before every upstream call: load the thread's state, rebuild the
projection (cheap cascade, sanitizer), estimate its size against the usage anchors, and build
the body. `finish_body` / `finish_stream` read what the upstream answered and record the usage
as the anchor for the next estimate. The pure work lives in `proxy/core`, `proxy/anchors.py`
and `proxy/tokens`; this module only sequences it and talks to the store.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy import jsonio
from aiohttp import web

from proxy import anchors
from proxy.conversation import Api, Entries
from proxy.core.cascade import CascadeContext, CascadeResult, run_cascade
from proxy.identity import Identities
from proxy.inbound import Inbound, with_entries
from proxy.lru import LRU
from proxy.outbound import build_body
from proxy.records import ThreadKey, ThreadState
from proxy.server.relay import PlainTap, StreamTap
from proxy.server.request_line import RequestLine
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.settings import ModelProfile, Settings, UpstreamSettings
from proxy.store import StateStore, create_store, thread_key_text
from proxy.streams import chat_message, responses_output, usage_of
from proxy.threads import ThreadIdentity
from proxy.tokens.encoding import encoding_name, tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.usage import normalize

RECENT_THREADS = 2048  # threads whose last entries are kept to rebuild only what is new


@dataclass
class Prepared:
    inbound: Inbound
    identity: ThreadIdentity
    upstream: UpstreamSettings
    body: bytes
    answer: web.StreamResponse | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    stream_tap: Callable[[], StreamTap] = PlainTap
    key: ThreadKey | None = None
    projection: Entries = ()
    context: bytes = b""
    estimate: int | None = None
    estimator: TokenEstimator | None = None


class Pipeline:
    def __init__(self, settings: Settings, *, store: StateStore | None = None, log: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store or create_store(settings.state)
        self.log = log
        self.clock = clock
        self.identities = Identities(settings.tokens.cache_entries)
        self._estimators: dict[str, TokenEstimator] = {}
        self._recent: LRU[ThreadKey, Entries] = LRU(RECENT_THREADS)

    async def start(self) -> None:
        await self.store.open()
        if self.log is not None:
            self.log.info("tokenizers", **self._tokenizers_in_use())

    async def stop(self) -> None:
        await self.store.close()

    # ---------------------------------------------------------------- before the upstream call

    async def prepare(self, inbound: Inbound, identity: ThreadIdentity,
                      upstream: UpstreamSettings, line: RequestLine) -> Prepared:
        key = self.thread_key(identity)
        inbound = with_entries(inbound, self._recent.get(key) or () if key else ())
        state = await self.store.load(key) if key else None
        estimator = self.estimator(inbound.model)
        prepared = Prepared(inbound, identity, upstream, inbound.body, key=key, estimator=estimator,
                            context=self._context(inbound))
        if key is not None and inbound.entries is not None:
            self._recent.put(key, inbound.entries)
        if inbound.entries is None or inbound.stateful_upstream:
            return self._pass_through(prepared, line)
        cascade = self._cascade(inbound.entries, state, estimator, inbound.model)
        if state is not None and cascade.mark is not None and cascade.mark != state.microcompact:
            await self.store.set_microcompact(key, cascade.mark)  # type: ignore[arg-type]
        projection = cascade.entries
        tokens, anchor = self._estimate(projection, prepared.context, estimator, inbound, state)
        prepared.projection, prepared.estimate = projection, tokens
        hide_usage = self._needs_usage_chunk(inbound)
        prepared.body = build_body(inbound, projection, include_usage=hide_usage)
        prepared.stream_tap = self._tap_factory(inbound.api, hide_usage)
        prepared.response_headers = {"x-context-tokens": str(tokens),
                                     "x-compaction": "applied" if cascade.changed else "none"}
        if key is not None:
            await self.store.record_request(key, self.clock(), tokens)
        line.set(tokens_estimate=tokens, anchor_used=anchor is not None,
                 tokenizer=estimator.tokenizer.describe(), **_stage_fields(cascade))
        return prepared

    def _pass_through(self, prepared: Prepared, line: RequestLine) -> Prepared:
        inbound = prepared.inbound
        if inbound.stateful_upstream:
            line.set(previous_response_id=True, note="state kept upstream: passed through")
        prepared.stream_tap = self._tap_factory(inbound.api, False)
        prepared.response_headers = {"x-compaction": "none"}
        return prepared

    def _cascade(self, entries: Entries, state: ThreadState | None,
                 estimator: TokenEstimator, model: str) -> CascadeResult:
        context = CascadeContext(
            settings=self.settings.compaction, measure=estimator.entry_tokens,
            keep_tokens=self.keep_tokens(model), message_ids=LazyIds(self.identities, entries),
            now=self.clock(), last_activity=state.last_activity if state else None,
            mark=state.microcompact if state else None)
        return run_cascade(entries, context)

    def _estimate(self, projection: Entries, context: bytes, estimator: TokenEstimator,
                  inbound: Inbound, state: ThreadState | None) -> tuple[int, Any]:
        sizes = estimator.sizes(projection)
        doc = inbound.doc
        conservative = estimator.conservative_total(projection, doc.get("tools"),
                                                    doc.get("instructions"), sizes)
        found = anchors.estimate(projection, sizes, context, state.anchors if state else (),
                                 conservative, self.identities.digest, estimator.margin)
        return found.tokens, found.anchor

    # ---------------------------------------------------------------- after the upstream call

    async def finish_body(self, prepared: Prepared, data: bytes, status: int,
                          line: RequestLine) -> None:
        if status != 200 or prepared.key is None:
            return
        try:
            body = jsonio.loads(data)
        except ValueError:
            return
        api = prepared.inbound.api
        response = chat_message(body) if api is Api.CHAT else responses_output(body)
        await self._record_usage(prepared, response, usage_of(body), line)

    async def finish_stream(self, prepared: Prepared, tap: StreamTap, status: int,
                            line: RequestLine) -> None:
        if not isinstance(tap, (ChatTap, ResponsesTap)) or status != 200:
            return
        if isinstance(tap, ChatTap) and tap.hidden:
            line.set(usage_chunk_hidden=True)
        if prepared.key is not None and tap.complete:
            await self._record_usage(prepared, tap.response(), tap.usage(), line)

    async def _record_usage(self, prepared: Prepared, response: Any, raw_usage: Any,
                            line: RequestLine) -> None:
        api = prepared.inbound.api
        estimator = prepared.estimator
        count = estimator.text_tokens if estimator else None
        usage = normalize(raw_usage, api, response, count)
        if usage is None or not response or prepared.key is None or not prepared.projection:
            return
        line.set(usage_input=usage.input, usage_output=usage.output, usage_cached=usage.cached,
                 usage_reasoning=usage.reasoning)
        entries = anchors.response_entries(api, response)
        anchor = anchors.make_anchor(prepared.projection, prepared.context, entries, usage,
                                     self.identities.digest, prepared.inbound.model, self.clock())
        await self.store.add_anchor(prepared.key, anchor)

    # ---------------------------------------------------------------- helpers

    def thread_key(self, identity: ThreadIdentity) -> ThreadKey | None:
        if identity.thread is None:
            return None
        return ThreadKey(identity.tenant, thread_key_text(identity.thread))

    def profile(self, model: str) -> ModelProfile | None:
        return self.settings.profile(model)

    def keep_tokens(self, model: str) -> int | None:
        """The protected tail in tokens; None without a profile (then it is counted in messages)."""
        profile = self.settings.profile(model)
        if profile is None or profile.max_input_tokens is None:
            return None
        ratio = profile.keep_ratio if profile.keep_ratio is not None else self.settings.compaction.keep_ratio
        return int(profile.max_input_tokens * ratio)

    def estimator(self, model: str) -> TokenEstimator:
        profile = self.settings.profile(model)
        name = encoding_name(model, profile.tokenizer if profile else None)
        found = self._estimators.get(name)
        if found is None:
            found = TokenEstimator(tokenizer_for(model, profile.tokenizer if profile else None),
                                   self.settings.tokens)
            self._estimators[name] = found
        return found

    def _tokenizers_in_use(self) -> dict[str, str]:
        models = {p.pattern: p for p in self.settings.models}
        out = {pattern: self.estimator(pattern).tokenizer.describe() for pattern in models}
        out["<default>"] = self.estimator("").tokenizer.describe()
        return out

    def _context(self, inbound: Inbound) -> bytes:
        doc = inbound.doc
        return anchors.context_bytes(doc.get("tools"), doc.get("instructions"), inbound.model)

    @staticmethod
    def _needs_usage_chunk(inbound: Inbound) -> bool:
        """A chat stream whose client did not ask for usage: ask for it, then hide it."""
        if inbound.api is not Api.CHAT or not inbound.stream:
            return False
        options = inbound.doc.get("stream_options")
        return not (isinstance(options, dict) and options.get("include_usage") is True)

    @staticmethod
    def _tap_factory(api: Api, hide_usage: bool) -> Callable[[], StreamTap]:
        if api is Api.CHAT:
            return lambda: ChatTap(hide_usage)
        return ResponsesTap


class LazyIds:
    """Message ids computed on first use: most requests never need them."""

    def __init__(self, identities: Identities, entries: Entries) -> None:
        self._identities = identities
        self._entries = entries
        self._ids: list[str] | None = None

    def _all(self) -> list[str]:
        if self._ids is None:
            self._ids = self._identities.ids(self._entries)
        return self._ids

    def __getitem__(self, index: int) -> str:
        return self._all()[index]

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Any:
        return iter(self._all())


def _stage_fields(cascade: CascadeResult) -> dict[str, Any]:
    stages = {r.name: {"changed": r.changed, "tokens_saved": r.tokens_saved}
              for r in cascade.reports if r.changed}
    return {"stages": stages, "tokens_saved": cascade.tokens_saved} if stages else {}
