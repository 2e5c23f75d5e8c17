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
from dataclasses import replace
from functools import partial
from operator import attrgetter
from typing import Any

from proxy import anchors, jsonio
from proxy.anchors import NO_SIZES
from proxy.compaction import manual
from proxy.compaction.trigger import may_act, requested_output_tokens
from proxy.conversation import Api
from proxy.conversation import CHAT as _CHAT
from proxy.errors import CompactionInsufficient, CompactionUnavailable
from proxy.identity import Identities
from proxy.inbound import Inbound, parse_inbound, with_entries
from proxy.item_sizes import ItemSizes
from proxy.lru import Memo, WeightedLRU
from proxy.outbound import build_body, needs_usage_chunk
from proxy.projection import Built, Situation, View, build, view_of
from proxy.records import MicrocompactMark, ThreadKey, ThreadState
from proxy.reparse import Known, known_of, reparse
from proxy.server import manual_answer
from proxy.server.compaction_flow import CompactionFlow
from proxy.server.compactor import Compactor
from proxy.server.estimators import OFF_LOOP_BYTES, Estimators, counted
from proxy.server.line_fields import error_named, lesson_fields, stage_fields
from proxy.server.prepared import Attempt, Prepared
from proxy.server.relay import StreamTap
from proxy.server.request_line import RequestLine
from proxy.server.retry_attempts import after_rejection, fixed, further_fix
from proxy.server.retry_lessons import RetryLessons
from proxy.server.taps import ChatTap, ResponsesTap
from proxy.server.untouched import untouched
from proxy.server.upstream import UpstreamClient
from proxy.server.usage_record import UsageRecorder
from proxy.settings import Settings, UpstreamSettings
from proxy.store import (NO_HOOKS, History, StateStore, create_history, create_store,
                         thread_key_text)
from proxy.store.cached import CachedStore
from proxy.store.failures import describe
from proxy.store.keys import MAX_KEPT_CHARS
from proxy.streams import chat_message, chat_messages, one_choice, responses_output, usage_of
from proxy.threads import ThreadIdentity, loggable
from proxy.tokens.estimate import TokenEstimator
from proxy.tokens.rules import request_definitions


_FIRST = Attempt()  # a first attempt with no lesson applied: `is` tells it
_WHOLE_WAY = Attempt()  # a first attempt all the same, never `untouched`


class Pipeline:
    def __init__(self, settings: Settings, *, client: UpstreamClient | None = None,
                 store: StateStore | None = None, history: History | None = None,
                 log: Any = None, metrics: Any = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        # Wrapped unless it is one: the request path reads a known thread's state from the
        # cache without a coroutine (`CachedStore.cached`).
        self.store = (store if isinstance(store, CachedStore) else CachedStore(
            store or create_store(settings.state, metrics.store_hooks() if metrics else NO_HOOKS)))
        self.history = history or create_history(settings.state)
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self.identities = Identities(settings.tokens.cache_entries)
        self.compactor = Compactor(settings, client or UpstreamClient(1), self.store,
                                   self.history, log, metrics, clock)
        self.flow = CompactionFlow(settings, self.store, self.compactor, log)
        if metrics is not None:
            metrics.watch_breakers(self.compactor.breakers.not_closed, settings.upstreams)
        self.lessons = RetryLessons()
        self.estimators = Estimators(settings)
        # Sizes of the Responses items relayed, per tenant: what an `item_reference` counts.
        self.item_sizes = ItemSizes()
        self.recorder = UsageRecorder(self.store, self.identities, self.estimators, log,
                                      self.item_sizes)
        # Each thread's last request, so a steady one parses and builds only what is new;
        # bounded by the bytes of the client's messages they hold.
        self._recent: WeightedLRU[ThreadKey, Known] = WeightedLRU(
            settings.server.recent_cache_mb * 1024 * 1024, attrgetter("weight"))

    async def start(self) -> None:
        await self.store.open()
        try:
            await self.history.open()
        except BaseException:
            await self.store.close()  # the history did not open: nothing else will close it
            raise
        if self.log is not None:
            self.log.info("tokenizers", **self.estimators.in_use())

    async def stop(self) -> None:
        try:
            await self.store.close()
        finally:
            await self.history.close()

    # ---------------------------------------------------------------- before the upstream call

    def parse(self, api: Api, body: bytes, thread: ThreadIdentity | None) -> Inbound:
        """The request, parsed as a delta of `thread`'s previous one when that is known.

        `thread` may be a guess (`threads.body_thread_hint`): the delta parse checks bytes."""
        key = self.thread_key(thread) if thread is not None else None
        known = self._recent.get(key) if key is not None else None
        if known is not None:
            inbound = reparse(api, body, known)
            if inbound is not None:
                return inbound
        return parse_inbound(api, body)

    async def prepare(self, inbound: Inbound, identity: ThreadIdentity, upstream: UpstreamSettings,
                      line: RequestLine, client_headers: Mapping[str, str],
                      attempt: Attempt = _FIRST) -> Prepared:
        """`client_headers`: the request's headers (the credentials a summary call forwards
        are read from them when a compaction needs them)."""
        key = self.thread_key(identity)
        if self.lessons.some and not attempt.retry:
            lesson = self.lessons.lesson(key, inbound.model)
            if lesson is not None:
                attempt = fixed(lesson, lesson=True)
        if (attempt is _FIRST and inbound.api is _CHAT and inbound.entries is None
                and not self.settings.tokens.count_every_request):
            quiet = await untouched(inbound, identity, upstream, client_headers, key, attempt,
                                    line, store=self.store, estimators=self.estimators,
                                    compaction=self.settings.compaction, taps=_CHAT_TAPS,
                                    now=self.clock)
            if quiet is not None:
                return quiet
        if inbound.entries is None:
            known = self._recent.get(key) if key else None
            previous = known.entries if known is not None and known.api is inbound.api else ()
            inbound = with_entries(inbound, previous)
        estimator = self.estimators.ready(inbound.model)
        if estimator is None:  # a model whose tokenizer is not loaded yet
            estimator = await self.estimators.loaded(inbound.model)
        doc = inbound.doc
        # What besides the list shapes the count (`rules.request_definitions`: `definitions`).
        definitions = request_definitions(doc)
        context = anchors.context_bytes(doc.get("tools"), doc.get("instructions"), inbound.model,
                                        definitions)
        # Positional, as `Situation` below.
        prepared = Prepared(inbound, identity, upstream, client_headers, inbound.body, attempt,
                            key, context, estimator)
        if inbound.entries is None or inbound.stateful_upstream:
            if self._lone_command(inbound):  # its one user message is the command (SPEC §8)
                return manual_answer.stateless(prepared, line, manual.lone_command_text(),
                                               "the command alone: nothing to compact")
            return self._pass_through(prepared, line)
        known = known_of(inbound) if key is not None else None
        if known is not None:
            self._recent.put(key, known)
        mentioned = self._mentioned_command(inbound)
        command = None if mentioned is None else manual.detect(inbound.entries, mentioned)
        if command is not None and key is None:  # no state to compact, no message for the model
            return manual_answer.stateless(prepared, line,
                                           manual.no_thread_text(self.settings.threads.headers),
                                           "no thread: nothing to compact")
        state = self.store.cached(key) if key else None
        if state is None and key:
            state = await self.store.load(key)
        view = self._view(inbound, prepared.context, definitions, mentioned)
        if len(inbound.body) >= OFF_LOOP_BYTES:  # else its new entries are fewer bytes
            unmeasured = estimator.unmeasured(view.entries)
            if unmeasured:  # a thread new to this process, or a turn's new messages
                await counted(estimator, unmeasured)
        situation = self._situation(inbound, identity.tenant, estimator, state, attempt)
        if command is not None:
            return await self.flow.manual_compact(prepared, view, situation, state, command, line)
        built = build(view, state.event if state else None, situation)
        if built.stale:  # said before a compaction's own build, which applies
            line.set(checkpoint_stale=True)
        if not built.cascade.entries and inbound.entries:  # all results without their call
            # Nothing to send of the client's list: its own request goes up as it came, and the
            # upstream's error says what is wrong with it (not one about an empty list).
            line.set(note="nothing left after repair: passed through")
            return self._pass_through(prepared, line)
        if may_act(built.tokens, situation.thresholds, prepared.attempt.forced):
            # Else `auto` hands `built` back as it is: no coroutine for the usual request.
            built = await self.flow.auto(prepared, view, situation, state, built, line)
        mark = built.cascade.mark
        if (state is not None and key is not None and mark is not None
                and mark != state.microcompact):
            await self._keep_mark(prepared, key, mark)
        # An earlier `/compact` exchange left out of the view changes the body too.
        edited = view.entries is not inbound.entries
        return self._finish_prepare(prepared, built, line, edited=edited)

    def _pass_through(self, prepared: Prepared, line: RequestLine) -> Prepared:
        inbound = prepared.inbound
        if inbound.upstream_state is not None:  # previous_response_id=True or conversation=True
            line.set(**{inbound.upstream_state: True}, note="state kept upstream: passed through")
        prepared.stream_tap = self._tap_factory(inbound.api, False)
        prepared.response_headers = {"x-compaction": "none"}
        return prepared

    def _finish_prepare(self, prepared: Prepared, built: Built, line: RequestLine,
                        edited: bool = False) -> Prepared:
        inbound, key = prepared.inbound, prepared.key
        cascade = built.cascade
        if prepared.attempt.placeholders is not None:
            entries, changed = prepared.attempt.placeholders(built.projection)
            if changed:  # the body is not the client's: `x-compaction` says so
                built, edited = replace(built, cascade=replace(cascade, entries=entries)), True
        if prepared.attempt.lesson:
            line.set(**lesson_fields(prepared.attempt, built))
        # `stream` first: most requests do not stream, and then nothing more is asked.
        hide_usage = (inbound.stream and prepared.upstream.stream_usage
                      and needs_usage_chunk(inbound))
        projection, event = built.projection, built.event  # properties: read once
        prepared.projection, prepared.estimate = projection, built.tokens
        prepared.body = build_body(inbound, projection, include_usage=hide_usage)
        prepared.stream_tap = self._tap_factory(inbound.api, hide_usage)
        compaction = ("compacted" if line.fields.get("compacted") else
                      "applied" if built.rebuilt is not None or cascade.changed or edited else "none")
        prepared.response_headers = {"x-context-tokens": str(built.tokens),
                                     "x-compaction": compaction}
        if key is not None:
            self.store.record_request(key, self.clock(), built.tokens)
        if self.metrics is not None and cascade.changed:
            for report in cascade.reports:
                self.metrics.observe_saved(report.name, report.tokens_saved)
        line.set(elements_reused=inbound.reused or None, tokens_estimate=built.tokens,
                 anchor_used=built.anchor is not None,
                 tokenizer=prepared.estimator.described if prepared.estimator else None,
                 compaction=compaction, checkpoint=event.seq if event else None,
                 protected=built.protected)
        if cascade.changed:
            line.set(**stage_fields(built))
        return prepared

    async def _keep_mark(self, prepared: Prepared, key: ThreadKey, mark: MicrocompactMark) -> None:
        """Persist how far microcompaction reached. A mark the store refuses (a full disk) costs
        only its stickiness: this request's projection is built, so the request goes on."""
        try:
            await self.store.set_microcompact(key, mark)
        except Exception as error:  # noqa: BLE001 - whatever the store raised, as for checkpoints
            if self.log is not None:  # as `usage_not_recorded`: the request stands
                self.log.warning("microcompact_not_recorded",
                                 thread=loggable(prepared.identity.thread),
                                 tenant=prepared.identity.tenant, **describe(error))

    def _lone_command(self, inbound: Inbound) -> bool:
        """A Responses request whose string `input` is the command; not one whose state (and
        history) is upstream."""
        config = self.settings.compaction
        return (inbound.api is Api.RESPONSES and config.enabled and not inbound.stateful_upstream
                and manual.is_command(inbound.doc.get("input"), config.manual_command))

    def _mentioned_command(self, inbound: Inbound) -> str | None:
        """The manual command when compaction is on and some user message begins with it
        (`manual.mentioned`); None on most requests. Only then can the latest message be the
        command (`manual.detect`) or the view have exchanges to strip: one walk asks both."""
        config = self.settings.compaction
        if not config.enabled or inbound.entries is None:
            return None
        command = config.manual_command
        return command if manual.mentioned(inbound.entries, command) else None

    # ---------------------------------------------------------------- one retry

    async def retry(self, prepared: Prepared, status: int, body: Any,
                    line: RequestLine) -> Prepared | None:
        """A second attempt after an upstream rejection, when one can help; else None."""
        if prepared.untouched and status >= 400:
            # Sent as it came (`untouched`). A rejection a retry can answer is judged on the
            # whole way's preparation of the request (the same bytes, counted: the line's
            # estimate too); any other is relayed without reading the thread's state, as the
            # whole way relays it.
            can_compact = self.settings.compaction.enabled and prepared.key is not None
            if after_rejection(prepared.attempt, status, body, compacted=False,
                               can_compact=can_compact)[0] is None:
                return None
            prepared = await self.prepare(prepared.inbound, prepared.identity,
                                          prepared.upstream, line, prepared.client_headers,
                                          _WHOLE_WAY)
        inbound, first = prepared.inbound, prepared.attempt
        if first.retry or inbound.entries is None or status < 400:
            if first.forced:  # the compaction the overflow bought made it, and it was refused
                self.flow.forced_retry_refused(prepared, line, status, body)
            elif first.retry and first.fix is not None:
                # Relayed, as any refused retry; the thread's next request names that one too.
                more = further_fix(first.fix, status, body)
                if more is not None:
                    self.lessons.learn(prepared.key, inbound.model, more)
                    line.set(retry_lesson_carried_on=len(more.items))
            return None
        if inbound.stateful_upstream:
            return None  # passed through, and would be again: the same body, the same answer
        attempt, refused = after_rejection(
            first, status, body, compacted=bool(line.fields.get("checkpoint")),
            can_compact=self.settings.compaction.enabled and prepared.key is not None)
        if refused:
            self.lessons.forget(prepared.key, inbound.model)
            line.set(retry_lesson_refused=True)
        if attempt is None:
            return None
        if self.log is not None:
            self.log.info("upstream_retry", thread=loggable(prepared.identity.thread),
                          tenant=prepared.identity.tenant, reason=attempt.reason, status=status)
        if self.metrics is not None:
            self.metrics.retries.labels(attempt.reason or "").inc()
        # The retry's call sets `upstream_ms` again: the refused call's wait is kept apart.
        line.set(retried=attempt.reason, first_status=status,
                 first_upstream_ms=line.fields.get("upstream_ms"))
        try:
            return await self.prepare(prepared.inbound, prepared.identity, prepared.upstream,
                                      line, prepared.client_headers, attempt)
        except (CompactionInsufficient, CompactionUnavailable) as failed:
            if not attempt.forced:
                raise
            self.flow.overflow_retry_failed(prepared, line, failed)
            return None  # the upstream's own overflow error tells the client best

    # ---------------------------------------------------------------- after the upstream call

    # Plain calls, not coroutines: nothing here waits (the store queues its writes).
    def finish_body(self, prepared: Prepared, data: bytes, status: int, line: RequestLine) -> None:
        """The usage an answer reports, on the request's line and (a thread's) as its anchor."""
        if status != 200:
            return
        if prepared.attempt.fix:  # a retry's fix passed, or a lesson applied did
            self._learn(prepared)
        try:
            body = jsonio.loads(data)
        except ValueError:
            return
        if prepared.inbound.api is not _CHAT:
            if type(body) is dict and body.get("status") == "failed":
                # No answer the client keeps: its usage is said, nothing anchored.
                line.set(upstream_error=error_named("response failed", body.get("error")))
                self._record_usage(prepared, None, usage_of(body), line)
                return
            self._record_usage(prepared, responses_output(body), usage_of(body), line)
            return
        usual = one_choice(body)
        if usual is not None:
            self._record_usage(prepared, usual[0], usual[1], line)
            return
        response = chat_message(body)
        # A message found means a list of choices; of several (`n` > 1) the client keeps any.
        choices = chat_messages(body) if response and len(body["choices"]) > 1 else None
        self._record_usage(prepared, response, usage_of(body), line, choices)

    def finish_stream(self, prepared: Prepared, tap: StreamTap, status: int,
                      line: RequestLine) -> None:
        if not isinstance(tap, (ChatTap, ResponsesTap)) or status != 200:
            return
        if prepared.attempt.fix:  # a retry's fix passed, or a lesson applied did
            self._learn(prepared)
        if isinstance(tap, ChatTap) and tap.hidden:
            line.set(usage_chunk_hidden=True)
        error = tap.stream.error
        if error is not None and line.fields.get("upstream_error") is None:
            # A 200 stream that ended in an error frame (or `response.failed`): relayed as it
            # came, and said on the line.
            line.set(upstream_error=error_named("error frame", error))
        if tap.unread is not None:  # the answer is not known whole (an event or it too large)
            line.set(usage_ignored=tap.unread)
        elif tap.complete:
            choices = tap.stream.messages() if isinstance(tap, ChatTap) else None
            response = tap.response() if choices is None else next(iter(choices), None)
            self._record_usage(prepared, response, tap.usage(), line, choices)
        elif error is not None and tap.usage():  # `response.failed` with its usage: said only
            self._record_usage(prepared, None, tap.usage(), line)

    def _learn(self, prepared: Prepared) -> None:
        """A retry's fix passed: the thread's later requests for this model get it at once."""
        attempt = prepared.attempt
        if attempt.fix is not None and not attempt.lesson:
            self.lessons.learn(prepared.key, prepared.inbound.model, attempt.fix)

    def _record_usage(self, prepared: Prepared, response: Any, raw_usage: Any,
                      line: RequestLine, choices: list[Any] | None = None) -> None:
        self.recorder.record(prepared, response, raw_usage, line, choices, self.clock)

    # ---------------------------------------------------------------- helpers

    @staticmethod
    def thread_key(identity: ThreadIdentity) -> ThreadKey | None:
        thread = identity.thread
        return None if thread is None else _THREAD_KEYS[identity.tenant, thread]

    def _view(self, inbound: Inbound, context: bytes, definitions: Any,
              mentioned: str | None) -> View:
        """`mentioned`: `_mentioned_command`; None spares `view_of` its own walk for it."""
        assert inbound.entries is not None
        doc = inbound.doc
        return view_of(inbound.entries, self.identities, mentioned, tools=doc.get("tools"),
                       instructions=doc.get("instructions"), context=context,
                       definitions=definitions)

    def _situation(self, inbound: Inbound, tenant: str, estimator: TokenEstimator,
                   state: ThreadState | None, attempt: Attempt) -> Situation:
        th = self.estimators.thresholds(inbound.model, requested_output_tokens(inbound.doc))
        # Positional, in the fields' order: a class called with keywords has them packed into
        # a dict and out again, about 500 instructions each (callgrind), every request.
        return Situation(self.settings.compaction, estimator, self.identities, th, self.clock(),
                         state.last_activity if state else None,
                         state.microcompact if state else None,  # the mark
                         state.anchors if state else (), attempt.policy, attempt.keep_loop,
                         # Only a Responses list holds references: a chat request spares it.
                         self.item_sizes.of(tenant) if inbound.api is not _CHAT else NO_SIZES)

    @staticmethod
    def _tap_factory(api: Api, hide_usage: bool) -> Callable[[], StreamTap]:
        return (_HIDING_CHAT_TAP if hide_usage else _CHAT_TAP) if api is _CHAT else ResponsesTap


_CHAT_TAP, _HIDING_CHAT_TAP = partial(ChatTap, False), partial(ChatTap, True)  # not one a request
_CHAT_TAPS = partial(Pipeline._tap_factory, _CHAT)


def _thread_key(named: tuple[str, str]) -> ThreadKey:
    tenant, thread = named
    return ThreadKey(tenant, thread_key_text(thread))


# Every request asks for its thread's key (twice: to parse, to prepare), and a client names
# its thread the same way each time: one lookup, one key object.
_THREAD_KEYS: Memo[tuple[str, str], ThreadKey] = Memo(
    _thread_key, max_entries=8192, max_chars=MAX_KEPT_CHARS, chars=lambda named: len(named[1]))
