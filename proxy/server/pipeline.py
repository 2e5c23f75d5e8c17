"""The request pipeline: from the client's request to the projection sent upstream, and back.

`prepare` is the recipe run before every upstream call: load the thread's state, rebuild the
projection from its checkpoint, run the cheap cascade, estimate, and compact with the LLM when
the estimate passes the trigger (or answer `/compact` itself). `retry` decides whether an
upstream rejection buys one more attempt (context overflow, rejected private state: SPEC §7.4,
§9). `finish_body` / `finish_stream` record the usage an answer reports as the next anchor.
The pure work lives in `proxy/projection.py`, `proxy/core`, `proxy/compaction`; one LLM
compaction is `proxy/server/compactor.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from aiohttp import web

from proxy import anchors, jsonio
from proxy.compaction import manual
from proxy.compaction.overflow import RetryAction, is_context_overflow, private_state_rejection
from proxy.compaction.trigger import Action, decide, requested_output_tokens, thresholds
from proxy.conversation import Api, Entries, leading_instructions
from proxy.core.sanitize import Policy
from proxy.errors import CompactionInsufficient, CompactionUnavailable
from proxy.identity import Identities
from proxy.inbound import Inbound, with_entries
from proxy.lru import WeightedLRU
from proxy.outbound import build_body
from proxy.projection import Built, Situation, View, build, measure_projection, view_of
from proxy.records import ThreadKey, ThreadState
from proxy.server import manual_answer
from proxy.server.compactor import CompactionFailed, Compactor, Job, NothingToCompact
from proxy.server.relay import PlainTap, StreamTap
from proxy.server.request_line import RequestLine
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.server.upstream import UpstreamClient
from proxy.settings import Settings, UpstreamSettings
from proxy.store import HistoryFiles, StateStore, create_history, create_store, thread_key_text
from proxy.store.cached import CachedStore
from proxy.streams import chat_message, responses_output, usage_of
from proxy.threads import ThreadIdentity, loggable
from proxy.tokens.encoding import encoding_name, tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.usage import normalize


_RETRY_POLICY = {
    RetryAction.STRIP_BLOBS: (Policy.COMPACTED, False),
    RetryAction.STAND_IN: (Policy.COMPACTED, False),
    RetryAction.RESTORE_LOOP_BLOBS: (None, True),
    RetryAction.DROP_PLAIN_REASONING: (Policy.PRIVATE_FREE, False),
}


@dataclass(frozen=True)
class Attempt:
    """How this attempt differs from a plain one (a retry after an upstream rejection)."""

    forced: bool = False  # an overflow buys one compaction, breaker and hysteresis bypassed
    policy: Policy | None = None
    keep_loop: bool = False
    reason: str | None = None

    @property
    def retry(self) -> bool:
        return self.reason is not None


@dataclass
class Prepared:
    inbound: Inbound
    identity: ThreadIdentity
    upstream: UpstreamSettings
    credentials: Mapping[str, str]
    body: bytes
    attempt: Attempt = field(default_factory=Attempt)
    answer: web.StreamResponse | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    stream_tap: Callable[[], StreamTap] = PlainTap
    key: ThreadKey | None = None
    projection: Entries = ()
    context: bytes = b""
    estimate: int | None = None
    estimator: TokenEstimator | None = None


class Pipeline:
    def __init__(self, settings: Settings, *, client: UpstreamClient | None = None,
                 store: StateStore | None = None, history: HistoryFiles | None = None,
                 log: Any = None, metrics: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.store = store or CachedStore(create_store(settings.state))
        self.history = history or create_history(settings.state)
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self.identities = Identities(settings.tokens.cache_entries)
        self.compactor = Compactor(settings, client or UpstreamClient(1), self.store,
                                   self.history, log, metrics, clock)
        self._estimators: dict[str, TokenEstimator] = {}  # by encoding
        self._by_model: dict[str, TokenEstimator] = {}
        # Each thread's last entries, so a steady request builds only what is new; bounded by
        # the bytes of the client's messages they hold.
        self._recent: WeightedLRU[ThreadKey, Entries] = WeightedLRU(
            settings.server.recent_cache_mb * 1024 * 1024, _entries_weight)

    async def start(self) -> None:
        await self.store.open()
        if self.log is not None:
            self.log.info("tokenizers", **self._tokenizers_in_use())

    async def stop(self) -> None:
        await self.store.close()

    # ---------------------------------------------------------------- before the upstream call

    async def prepare(self, inbound: Inbound, identity: ThreadIdentity, upstream: UpstreamSettings,
                      line: RequestLine, credentials: Mapping[str, str],
                      attempt: Attempt = Attempt()) -> Prepared:
        key = self.thread_key(identity)
        if inbound.entries is None:
            inbound = with_entries(inbound, (self._recent.get(key) or ()) if key else ())
        estimator = self.estimator(inbound.model)
        prepared = Prepared(inbound, identity, upstream, credentials, inbound.body, attempt,
                            key=key, estimator=estimator, context=self._context(inbound))
        if inbound.entries is None or inbound.stateful_upstream:
            return self._pass_through(prepared, line)
        if key is not None:
            self._recent.put(key, inbound.entries)
        state = await self.store.load(key) if key else None
        view = self._view(inbound, prepared.context)
        situation = self._situation(inbound, estimator, state, attempt)
        command = self._command(inbound, key)
        if command is not None:
            return await self._manual(prepared, view, situation, state, command, line)
        built = build(view, state.event if state else None, situation)
        built = await self._compact_if_needed(prepared, view, situation, state, built, line)
        return await self._finish_prepare(prepared, built, state, line)

    def _pass_through(self, prepared: Prepared, line: RequestLine) -> Prepared:
        inbound = prepared.inbound
        if inbound.stateful_upstream:
            line.set(previous_response_id=True, note="state kept upstream: passed through")
        prepared.stream_tap = self._tap_factory(inbound.api, False)
        prepared.response_headers = {"x-compaction": "none"}
        return prepared

    async def _finish_prepare(self, prepared: Prepared, built: Built, state: ThreadState | None,
                              line: RequestLine) -> Prepared:
        inbound, key = prepared.inbound, prepared.key
        cascade = built.cascade
        if (state is not None and key is not None and cascade.mark is not None
                and cascade.mark != state.microcompact):
            await self.store.set_microcompact(key, cascade.mark)
        hide_usage = _needs_usage_chunk(inbound)
        prepared.projection, prepared.estimate = built.projection, built.tokens
        prepared.body = build_body(inbound, built.projection, include_usage=hide_usage)
        prepared.stream_tap = self._tap_factory(inbound.api, hide_usage)
        compaction = ("compacted" if line.fields.get("compacted") else
                      "applied" if built.rebuilt is not None or cascade.changed else "none")
        prepared.response_headers = {"x-context-tokens": str(built.tokens),
                                     "x-compaction": compaction}
        if key is not None:
            await self.store.record_request(key, self.clock(), built.tokens)
        line.set(tokens_estimate=built.tokens, anchor_used=built.anchor is not None,
                 tokenizer=prepared.estimator.tokenizer.describe() if prepared.estimator else None,
                 compaction=compaction, checkpoint=built.event.seq if built.event else None,
                 protected=len(built.projection) - cascade.window_start,
                 **_stage_fields(built))
        return prepared

    # ---------------------------------------------------------------- LLM compaction

    async def _compact_if_needed(self, prepared: Prepared, view: View, situation: Situation,
                                 state: ThreadState | None, built: Built,
                                 line: RequestLine) -> Built:
        config = self.settings.compaction
        th = situation.thresholds
        decision = decide(built.tokens, th, built.event, config.rearm_ratio,
                          forced=prepared.attempt.forced)
        if not config.enabled or decision.action in (Action.NONE, Action.HOLD):
            return built
        if decision.action is Action.REFUSE:
            self._failed_line(line, prepared, "hysteresis", "the context did not shrink enough "
                              "since the last compaction", degraded=False)
            raise CompactionInsufficient(
                f"This conversation stays at about {built.tokens:,} tokens even after context "
                f"compaction, over the model's limit of {th.limit:,}. Please start a new thread "
                "to continue.")
        if prepared.key is None:
            return self._stateless(built, th.fits(built.tokens), line)
        if not prepared.attempt.forced:
            allowed, wait = self.compactor.breaker_allows(prepared.inbound.model, prepared.upstream)
            if not allowed:
                return self._degrade(prepared, built, th.fits(built.tokens), "breaker_open",
                                     f"the summarizer's circuit breaker is open for {wait:.1f}s",
                                     line, wait)
        async with self.compactor.lock(prepared.key):
            return await self._compact_locked(prepared, view, situation, state, built, line)

    async def _compact_locked(self, prepared: Prepared, view: View, situation: Situation,
                              state: ThreadState | None, built: Built, line: RequestLine) -> Built:
        assert prepared.key is not None
        latest = await self.store.load(prepared.key)
        if _seq(latest) != _seq(state):
            # Another request compacted this thread while we waited: use its checkpoint.
            built = build(view, latest.event, replace(situation, anchors=latest.anchors))
            decision = decide(built.tokens, situation.thresholds, built.event,
                              self.settings.compaction.rearm_ratio)
            if decision.action is not Action.COMPACT:
                line.set(compaction_reused=latest.event.seq if latest.event else None)
                return built
        job = self._job(prepared, view, situation, built, strategy=self.settings.compaction.strategy)
        th = situation.thresholds
        # After an upstream overflow the same projection must not go up again.
        fits = th.fits(built.tokens) and not prepared.attempt.forced
        try:
            event = await self.compactor.compact(job)
        except NothingToCompact:
            if fits:
                return built
            raise CompactionInsufficient(
                f"This conversation is about {built.tokens:,} tokens and nothing more can be "
                f"compacted (the recent messages alone are over the limit of {th.limit:,}). "
                "Please start a new thread to continue.") from None
        except CompactionFailed as failed:
            if failed.stage == "post_check":
                raise failed.verdict.error() from None  # type: ignore[attr-defined]
            return self._degrade(prepared, built, fits, failed.stage, failed.reason, line, None,
                                 logged=True)
        line.set(compacted=True)
        return build(view, event, replace(situation, anchors=()))

    def _job(self, prepared: Prepared, view: View, situation: Situation, built: Built, *,
             strategy: str, focus: str | None = None) -> Job:
        assert prepared.key is not None and prepared.estimator is not None
        inbound = prepared.inbound
        return Job(key=prepared.key, thread=loggable(prepared.identity.thread), api=inbound.api,
                   model=inbound.model, upstream=prepared.upstream,
                   credentials=prepared.credentials, entries=view.entries, ids=view.ids,
                   previous=built.rebuilt.previous if built.rebuilt else None,
                   thresholds=situation.thresholds, strategy=strategy,
                   tokens_before=built.tokens, estimate=measure_projection(view, situation),
                   estimator=prepared.estimator, client_doc=inbound.doc, focus=focus,
                   forced=prepared.attempt.forced)

    def _degrade(self, prepared: Prepared, built: Built, fits: bool, stage: str, reason: str,
                 line: RequestLine, retry_after: float | None, logged: bool = False) -> Built:
        if not logged:
            self._failed_line(line, prepared, stage, reason, degraded=fits, retry_after=retry_after)
        line.set(compaction_degraded=stage)
        if fits:
            return built
        headers = {"Retry-After": str(max(1, int(retry_after)))} if retry_after else None
        raise CompactionUnavailable(
            f"This conversation (about {built.tokens:,} tokens) needs context compaction, but "
            f"it is unavailable right now ({reason}). Retry later, or start a new thread.",
            headers=headers)

    def _stateless(self, built: Built, fits: bool, line: RequestLine) -> Built:
        line.set(compaction_skipped="no thread id")
        if fits:
            return built
        raise CompactionInsufficient(
            f"This conversation (about {built.tokens:,} tokens) is over the model's limit and "
            "the proxy cannot compact it without a thread id: send an `x-thread-id` header or "
            "`prompt_cache_key`, or start a new thread.")

    def _failed_line(self, line: RequestLine, prepared: Prepared, stage: str, reason: str,
                     degraded: bool, retry_after: float | None = None) -> None:
        if self.log is not None:
            self.log.warning("compaction_failed", thread=loggable(prepared.identity.thread),
                             stage=stage, error=reason, degraded=degraded,
                             retry_after_s=None if retry_after is None else round(retry_after, 3))

    # ---------------------------------------------------------------- manual /compact

    def _command(self, inbound: Inbound, key: ThreadKey | None) -> manual.ManualCommand | None:
        config = self.settings.compaction
        if not config.enabled or key is None or inbound.entries is None:
            return None
        return manual.detect(inbound.entries, config.manual_command)

    async def _manual(self, prepared: Prepared, view: View, situation: Situation,
                      state: ThreadState | None, command: manual.ManualCommand,
                      line: RequestLine) -> Prepared:
        assert prepared.key is not None
        line.set(manual_compact=True)
        async with self.compactor.lock(prepared.key):
            latest = await self.store.load(prepared.key)
            built = build(view, latest.event, replace(situation, anchors=latest.anchors))
            job = self._job(prepared, view, situation, built, strategy="manual",
                            focus=command.focus)
            try:
                event = await self.compactor.compact(job)
            except NothingToCompact:
                text = manual.nothing_text(built.tokens)
                compaction = "none"
            except CompactionFailed as failed:
                if failed.stage == "post_check":
                    raise failed.verdict.error() from None  # type: ignore[attr-defined]
                raise CompactionUnavailable(f"Compaction failed: {failed.reason}. The "
                                            "conversation is unchanged; try again later.") from None
            else:
                lead = leading_instructions(view.entries)
                text = manual.compacted_text(event.cutoff_index - lead,
                                             len(view.entries) - event.cutoff_index,
                                             event.tokens_before, event.tokens_after)
                compaction = "compacted"
        headers = {"x-compaction": compaction, "x-context-tokens": str(built.tokens)}
        seed = f"{prepared.key.tenant}\0{prepared.key.thread}\0{len(view.entries)}"
        prepared.answer = manual_answer.answer(prepared.inbound, text, seed, headers)
        line.set(compaction=compaction, tokens_estimate=built.tokens)
        return prepared

    # ---------------------------------------------------------------- one retry

    async def retry(self, prepared: Prepared, status: int, body: Any,
                    line: RequestLine) -> Prepared | None:
        """A second attempt after an upstream rejection, when one can help; else None."""
        if prepared.attempt.retry or prepared.inbound.entries is None or status < 400:
            return None
        if (is_context_overflow(status, body) and self.settings.compaction.enabled
                and prepared.key is not None):
            attempt = Attempt(forced=True, reason="context_overflow")
        else:
            rejection = private_state_rejection(status, body)
            if rejection is None or rejection.action not in _RETRY_POLICY:
                return None
            policy, keep_loop = _RETRY_POLICY[rejection.action]
            if keep_loop and not line.fields.get("checkpoint"):
                return None  # the client's own blocks went up untouched: nothing to restore
            attempt = Attempt(policy=policy, keep_loop=keep_loop, reason=rejection.reason)
        if self.log is not None:
            self.log.info("upstream_retry", thread=loggable(prepared.identity.thread),
                          reason=attempt.reason, status=status)
        if self.metrics is not None:
            self.metrics.retries.labels(attempt.reason or "").inc()
        line.set(retried=attempt.reason, first_status=status)
        try:
            return await self.prepare(prepared.inbound, prepared.identity, prepared.upstream,
                                      line, prepared.credentials, attempt)
        except (CompactionInsufficient, CompactionUnavailable):
            if attempt.forced:
                return None  # the upstream's own overflow error tells the client best
            raise

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
        usage = normalize(raw_usage, api, response, estimator.text_tokens if estimator else None)
        if usage is None or not response or prepared.key is None or not prepared.projection:
            return
        line.set(usage_input=usage.input, usage_output=usage.output, usage_cached=usage.cached,
                 usage_reasoning=usage.reasoning)
        entries = anchors.response_entries(api, response)
        anchor = anchors.make_anchor(prepared.projection, prepared.context, entries, usage,
                                     self.identities.content_digest, prepared.inbound.model,
                                     self.clock())
        await self.store.add_anchor(prepared.key, anchor)

    # ---------------------------------------------------------------- helpers

    def thread_key(self, identity: ThreadIdentity) -> ThreadKey | None:
        if identity.thread is None:
            return None
        return ThreadKey(identity.tenant, thread_key_text(identity.thread))

    def estimator(self, model: str) -> TokenEstimator:
        found = self._by_model.get(model)
        if found is None:
            found = self._estimator_for(model)
            if len(self._by_model) < 4096:
                self._by_model[model] = found
        return found

    def _estimator_for(self, model: str) -> TokenEstimator:
        profile = self.settings.profile(model)
        tokenizer = profile.tokenizer if profile else None
        name = encoding_name(model, tokenizer)
        found = self._estimators.get(name)
        if found is None:
            found = TokenEstimator(tokenizer_for(model, tokenizer), self.settings.tokens)
            self._estimators[name] = found
        return found

    def _view(self, inbound: Inbound, context: bytes) -> View:
        config = self.settings.compaction
        command = config.manual_command if config.enabled else None
        assert inbound.entries is not None
        return view_of(inbound.entries, self.identities, command, tools=inbound.doc.get("tools"),
                       instructions=inbound.doc.get("instructions"), context=context)

    def _situation(self, inbound: Inbound, estimator: TokenEstimator,
                   state: ThreadState | None, attempt: Attempt) -> Situation:
        profile = self.settings.profile(inbound.model)
        th = thresholds(self.settings.compaction, profile, requested_output_tokens(inbound.doc))
        return Situation(self.settings.compaction, estimator, self.identities, th,
                         now=self.clock(), last_activity=state.last_activity if state else None,
                         mark=state.microcompact if state else None,
                         anchors=state.anchors if state else (), policy=attempt.policy,
                         keep_loop=attempt.keep_loop)

    def _tokenizers_in_use(self) -> dict[str, str]:
        out = {p.pattern: self.estimator(p.pattern).tokenizer.describe()
               for p in self.settings.models}
        out["<default>"] = self.estimator("").tokenizer.describe()
        return out

    def _context(self, inbound: Inbound) -> bytes:
        doc = inbound.doc
        return anchors.context_bytes(doc.get("tools"), doc.get("instructions"), inbound.model)

    @staticmethod
    def _tap_factory(api: Api, hide_usage: bool) -> Callable[[], StreamTap]:
        if api is Api.CHAT:
            return lambda: ChatTap(hide_usage)
        return ResponsesTap


def _needs_usage_chunk(inbound: Inbound) -> bool:
    """A chat stream whose client did not ask for usage: ask for it, then hide it."""
    if inbound.api is not Api.CHAT or not inbound.stream:
        return False
    options = inbound.doc.get("stream_options")
    return not (isinstance(options, dict) and options.get("include_usage") is True)


def _entries_weight(entries: Entries) -> int:
    return sum(len(e.source) if e.source is not None else 256 for e in entries)


def _seq(state: ThreadState | None) -> int:
    return state.event.seq if state is not None and state.event is not None else 0


def _stage_fields(built: Built) -> dict[str, Any]:
    stages = {r.name: {"changed": r.changed, "tokens_saved": r.tokens_saved}
              for r in built.cascade.reports if r.changed}
    return {"stages": stages, "tokens_saved": built.cascade.tokens_saved} if stages else {}
