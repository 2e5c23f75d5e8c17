"""LLM compaction inside a request: when to summarize, what to do when it fails, `/compact`.

`auto` runs after the cheap cascade: below the trigger nothing happens; above it, one summary
per thread at a time (a request that waited reuses the checkpoint another one wrote, or shares
the failure of the summary it waited for, and of its post-check when it would check the same
projection, or of a refusal its inputs decided when it would give the same inputs,
`proxy/server/turns.py`, and asks the breaker again: the one before it may have just opened
it), with the breaker, the hysteresis and the fallbacks of SPEC §9: forward with the cheap
stages only while the projection fits, else a clear error: a 503 that says when to retry when
the summarizer's side failed, the client's own status when the failure is the client's (its
credential refused or rate-limited by the summarizer's upstream, its content refused by the
upstream's content policy, a plan or a re-plan over `max_calls`: `client_owned`). A request
over the limit only by the guessed sizes of `item_reference`s to items the proxy never relayed
(`Built.guessed`) is never refused: it is forwarded, and upstream, which knows the items,
decides (`_guesses_alone`). `manual`
answers `/compact` (SPEC §8) itself. `overflow_retry_failed` records the forced compaction an
upstream overflow bought that did not help. Both run a started
compaction to its end when the client leaves (its retry waits on the thread's lock and reuses
the checkpoint); the request's line, a 499, says so (`compaction_detached`) once it has ended.
A compaction whose lease passed to another instance stops, and its request takes its turn
once more (`proxy/server/thread_lease.py`): it reuses the new holder's checkpoint, or decides
again; a second loss degrades it (stage `lease_lost`).
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from functools import partial
from typing import Any

from proxy.compaction import manual, postcheck
from proxy.compaction.breaker import Blocked
from proxy.compaction.overflow import is_context_overflow
from proxy.compaction.trigger import Action, Thresholds, decide
from proxy.conversation import leading_instructions
from proxy.errors import CompactionInsufficient, CompactionUnavailable, ProxyError
from proxy.projection import Built, Situation, View, build, measure_projection
from proxy.records import CompactionEvent, ThreadState
from proxy.server import manual_answer
from proxy.server.compaction_answers import (manual_failed, owned_error, post_check_error,
                                             retry_after, waited_for)
from proxy.server.compaction_errors import LeasePassed
from proxy.server.compactor import (BreakerOpen, ClientLeft, CompactionCut, CompactionFailed,
                                    Compactor, Job, NothingToCompact)
from proxy.server.prepared import Prepared
from proxy.server.request_line import RequestLine
from proxy.server.thread_lease import LeaseWatch, in_turns
from proxy.server.turns import POST_CHECK, Meanwhile, SharedFailure
from proxy.server.window_hints import window_hint
from proxy.settings import Settings
from proxy.store import StateStore
from proxy.threads import loggable


class CompactionFlow:
    def __init__(self, settings: Settings, store: StateStore, compactor: Compactor,
                 log: Any) -> None:
        self.settings = settings
        self.store = store
        self.compactor = compactor
        self.log = log
        self.metrics = compactor.metrics

    async def auto(self, prepared: Prepared, view: View, situation: Situation,
                                 state: ThreadState | None, built: Built,
                                 line: RequestLine) -> Built:
        config = self.settings.compaction
        th = situation.thresholds
        decision = decide(built.tokens, th, built.event, config.rearm_ratio,
                          forced=prepared.attempt.forced)
        if not config.enabled or decision.action in (Action.NONE, Action.HOLD):
            return built
        if decision.action is Action.REFUSE:
            if _guesses_alone(prepared, built, th):
                return self._forward_guessed(prepared, built, "hysteresis", line)
            self._refuse(prepared, built, th, line)
        if prepared.key is None:
            return self._stateless(built, th, line, _guesses_alone(prepared, built, th))
        if not prepared.attempt.forced and not self.compactor.running(prepared.key):
            # Only a look: waiting for the lock is pointless while the breaker is open, unless
            # this thread's own compaction holds it (the breaker's trial, say, whose client left
            # and retries): its checkpoint may serve, and `compact` asks the breaker again.
            blocked = self.compactor.breaker_blocked(prepared.inbound.model, prepared.upstream)
            if blocked is not None:
                return self._degrade(prepared, built, th.fits(built.tokens), "breaker_open",
                                     blocked.reason, line, blocked, config.strategy)
        return await in_turns(self.compactor.turns, self.store, prepared.key, line,
                              partial(self._compact_locked, prepared, view, situation, state,
                                      built, line))

    async def _compact_locked(self, prepared: Prepared, view: View, situation: Situation,
                              state: ThreadState | None, built: Built, line: RequestLine,
                              meanwhile: Meanwhile, lease: LeaseWatch | None) -> Built:
        assert prepared.key is not None
        latest = await self.store.load(prepared.key)
        if _seq(latest) != _seq(state):
            # Another request compacted this thread while we waited: use its checkpoint.
            built = build(view, latest.event, replace(situation, anchors=latest.anchors))
            decision = decide(built.tokens, situation.thresholds, built.event,
                              self.settings.compaction.rearm_ratio)
            line.set(compaction_reused=latest.event.seq if latest.event else None)
            if decision.action is Action.REFUSE:  # as for a request that did not wait
                if _guesses_alone(prepared, built, situation.thresholds):
                    return self._forward_guessed(prepared, built, "hysteresis", line)
                self._refuse(prepared, built, situation.thresholds, line)
            if decision.action is not Action.COMPACT:
                return built
            line.set(compaction_reused=None)
        job = self._job(prepared, view, situation, built, strategy=self.settings.compaction.strategy)
        th = situation.thresholds
        guessed = _guesses_alone(prepared, built, th)
        fits = job.fits_without_compaction or guessed
        shared = self._shared(prepared, meanwhile, job)
        if shared is not None and shared.stage == POST_CHECK:
            if guessed:
                return self._forward_guessed(prepared, built, POST_CHECK, line,
                                             waited_for(shared))
            self._shared_line(line, prepared, shared, job.strategy)
            raise post_check_error(shared.verdict, shared.reason)
        if shared is not None:
            return self._degrade(prepared, built, fits, shared.stage, waited_for(shared), line,
                                 None, job.strategy, shared=True,
                                 owned=owned_error(shared, built))
        try:
            event = await self._compact(job, line, lease)
        except BreakerOpen as refused:
            return self._degrade(prepared, built, fits, "breaker_open", refused.blocked.reason,
                                 line, refused.blocked, job.strategy)
        except LeasePassed as passed:
            if not passed.last:
                raise  # `in_turns` takes the thread's turn again
            line.set(compaction_failed="lease_lost", compaction_lease_lost=2)
            return self._degrade(prepared, built, fits, "lease_lost", passed.reason, line, None,
                                 job.strategy, logged=True)
        except NothingToCompact:
            if fits:
                if guessed:
                    line.set(tokens_guessed=built.guessed)
                return built
            hint = window_hint(self.settings, prepared.inbound.model, built.tokens, th.limit)
            over = ("the model rejected it as too long" + (f" ({hint})" if hint else "")
                    if prepared.attempt.forced else "they are over the model's input limit")
            reason = (f"nothing more can be compacted: the system prompt and the recent "
                      f"messages kept verbatim remain, and {over}")
            self.compactor.refused(job, reason)
            line.set(compaction_failed="post_check")
            raise postcheck.insufficient(reason, built.tokens, th.trigger, th.limit) from None
        except CompactionFailed as failed:
            line.set(compaction_failed=failed.stage)
            if failed.stage == POST_CHECK and guessed:
                return self._forward_guessed(prepared, built, POST_CHECK, line, failed.reason,
                                             logged=True)
            if failed.stage == POST_CHECK:
                raise post_check_error(failed.verdict, failed.reason) from None
            return self._degrade(prepared, built, fits, failed.stage, failed.reason, line,
                                 self._breaker_after(prepared), job.strategy, logged=True,
                                 owned=owned_error(failed, built))
        line.set(compacted=True)
        return build(view, event, situation)

    def _job(self, prepared: Prepared, view: View, situation: Situation, built: Built, *,
             strategy: str, focus: str | None = None) -> Job:
        assert prepared.key is not None and prepared.estimator is not None
        inbound = prepared.inbound
        return Job(key=prepared.key, thread=loggable(prepared.identity.thread), api=inbound.api,
                   model=inbound.model, upstream=prepared.upstream,
                   credentials=prepared.credentials(self.settings.threads.credential_headers),
                   entries=view.entries, ids=view.ids,
                   previous=built.rebuilt.previous if built.rebuilt else None,
                   thresholds=situation.thresholds, strategy=strategy,
                   tokens_before=built.tokens, estimate=measure_projection(view, situation),
                   estimator=prepared.estimator, client_doc=inbound.doc, focus=focus,
                   forced=prepared.attempt.forced, anchors=situation.anchors,
                   stale=built.stale, references=situation.references)

    def _forward_guessed(self, prepared: Prepared, built: Built, stage: str, line: RequestLine,
                         reason: str = "", logged: bool = False) -> Built:
        """A refusal the guessed sizes of unknown references alone decided: forwarded with the
        cheap stages, as a degraded request, the line saying how much was guessed."""
        line.set(tokens_guessed=built.guessed)
        reason = (f"{reason}; " if reason else "") + (
            f"forwarded: {built.guessed:,} of its {built.tokens:,} estimated tokens are guesses "
            "for item_references to items the proxy never relayed, and without them it fits")
        return self._degrade(prepared, built, True, stage, reason, line, None,
                             self.settings.compaction.strategy, logged=logged)

    def _refuse(self, prepared: Prepared, built: Built, th: Thresholds, line: RequestLine) -> None:
        """Hysteresis: over the limit, and too soon after the last compaction for another."""
        self._failed_line(line, prepared, "hysteresis", "the context did not shrink enough "
                          "since the last compaction", self.settings.compaction.strategy,
                          degraded=False)
        raise postcheck.insufficient(
            "hysteresis: it is over the model's input limit, and it has not grown enough "
            "since the last compaction for another one to help", built.tokens, th.trigger,
            th.limit)

    def _shared(self, prepared: Prepared, meanwhile: Meanwhile, job: Job) -> SharedFailure | None:
        """The failure this request shares instead of compacting: one that came while it
        waited and that its own compaction would repeat (`turns.SharedFailure.concerns`). One
        decided by the request's content (a post-check's, a plan over `max_calls`), whatever
        the breaker says and even on an attempt an upstream overflow bought; the summarizer's
        side's, unless the breaker has
        opened since (its own answer, with its wait, is then the better one) or an overflow
        bought this attempt (SPEC §9: one necessary compaction, past the breaker)."""
        if not meanwhile.failures:
            return None
        summarizer = not prepared.attempt.forced and self._breaker_after(prepared) is None
        return meanwhile.shared(job.inputs, summarizer=summarizer)

    def _shared_line(self, line: RequestLine, prepared: Prepared, shared: SharedFailure,
                     strategy: str) -> None:
        """A shared failure that does not forward the request (a post-check's, `/compact`)."""
        self._failed_line(line, prepared, shared.stage, waited_for(shared), strategy,
                          degraded=False, shared=True)
        line.set(compaction_shared=True)

    def _degrade(self, prepared: Prepared, built: Built, fits: bool, stage: str, reason: str,
                 line: RequestLine, blocked: Blocked | None, strategy: str, logged: bool = False,
                 shared: bool = False, owned: ProxyError | None = None) -> Built:
        """Forward with the cheap stages only when it fits; else `owned`, the client's own
        answer to a failure that is the client's (`owned_error`), or a 503 that says when to
        retry (`blocked`: the breaker's wait, None when it is closed). `shared`: the failure
        is the compaction's this request waited for."""
        if not logged:
            self._failed_line(line, prepared, stage, reason, strategy, degraded=fits,
                              retry_after=blocked.wait_s if blocked else None,
                              **({"shared": True} if shared else {}))
        # Degraded is forwarded with the cheap stages only: a refused request is not.
        line.set(compaction_degraded=stage if fits else None, compaction_shared=shared or None)
        if fits:
            if self.metrics is not None:
                self.metrics.observe_degraded(stage)
            return built
        if owned is not None:
            raise owned
        if blocked is not None and blocked.reason != reason:
            reason = f"{reason}; {blocked.reason}"
        raise CompactionUnavailable(
            f"This conversation (about {built.tokens:,} tokens) needs context compaction, but "
            f"it is unavailable right now ({reason}). Retry later, or start a new thread.",
            headers=retry_after(blocked))

    def _breaker_after(self, prepared: Prepared) -> Blocked | None:
        """The breaker after a failure: this very failure may have opened it."""
        return self.compactor.breaker_blocked(prepared.inbound.model, prepared.upstream)

    def overflow_retry_failed(self, prepared: Prepared, line: RequestLine,
                              error: ProxyError) -> None:
        """The compaction an upstream overflow bought did not help: the client gets the
        upstream's own error, and the log says why (`cause`: the stage that failed)."""
        cause = line.fields.get("compaction_failed")
        # Refused at about the estimate of what went up: a profile whose window is above it
        # is the profile to fix, as when the retry itself is refused.
        hint = window_hint(self.settings, prepared.inbound.model,
                           line.fields.get("tokens_estimate"))
        self._failed_line(line, prepared, "overflow_retry", error.message,
                          self.settings.compaction.strategy, degraded=False, cause=cause,
                          **({"hint": hint} if hint else {}))

    def forced_retry_refused(self, prepared: Prepared, line: RequestLine, status: int,
                             body: Any) -> None:
        """The retry an upstream overflow bought went up compacted and was refused as too long
        again: the client gets that refusal, and the log says the compaction did not help."""
        if not is_context_overflow(status, body):
            return
        hint = window_hint(self.settings, prepared.inbound.model,
                           line.fields.get("tokens_estimate"))
        self._failed_line(line, prepared, "overflow_retry", "the compacted retry was refused as "
                          "too long as well", self.settings.compaction.strategy, degraded=False,
                          cause="refused_again", **({"hint": hint} if hint else {}))

    def _stateless(self, built: Built, th: Thresholds, line: RequestLine,
                   guessed: bool = False) -> Built:
        """`guessed`: only guesses for unknown references put it over (`_guesses_alone`)."""
        line.set(compaction_skipped="no thread id")
        if th.fits(built.tokens) or guessed:
            if guessed:
                line.set(tokens_guessed=built.guessed)
            return built
        raise CompactionInsufficient(
            f"This conversation (about {built.tokens:,} tokens) is over the model's input limit "
            f"of {th.limit:,} tokens and the proxy cannot compact it without a thread id: send "
            "an `x-thread-id` header or `prompt_cache_key`, or start a new thread.")

    def _failed_line(self, line: RequestLine, prepared: Prepared, stage: str, reason: str,
                     strategy: str, degraded: bool, retry_after: float | None = None,
                     **extra: Any) -> None:
        """The `compaction_failed` event of a compaction refused or not tried, counted as the
        compactor counts its own failures; a shared one is not: the compaction that failed
        counted it once."""
        line.set(compaction_failed=stage)
        if self.metrics is not None and not extra.get("shared"):
            self.metrics.observe_compaction_failed(strategy, stage)
        if self.log is not None:
            self.log.warning("compaction_failed", thread=loggable(prepared.identity.thread),
                             tenant=prepared.identity.tenant, stage=stage, error=reason, degraded=degraded,
                             retry_after_s=None if retry_after is None else round(retry_after, 3),
                             **extra)

    async def manual_compact(self, prepared: Prepared, view: View, situation: Situation,
                      state: ThreadState | None, command: manual.ManualCommand,
                      line: RequestLine) -> Prepared:
        assert prepared.key is not None
        line.set(manual_compact=True)
        text, compaction, built = await in_turns(
            self.compactor.turns, self.store, prepared.key, line,
            partial(self._manual_locked, prepared, view, situation, command, line))
        headers = {"x-compaction": compaction, "x-context-tokens": str(built.tokens)}
        seed = f"{prepared.key.tenant}\0{prepared.key.thread}\0{len(view.entries)}"
        prepared.answer = manual_answer.answer(prepared.inbound, text, seed, headers)
        line.set(compaction=compaction, tokens_estimate=built.tokens)
        return prepared

    async def _manual_locked(self, prepared: Prepared, view: View, situation: Situation,
                             command: manual.ManualCommand, line: RequestLine,
                             meanwhile: Meanwhile,
                             lease: LeaseWatch | None) -> tuple[str, str, Built]:
        """`/compact` in the thread's turn: the answer's text, its `x-compaction`, and the
        projection it measured."""
        assert prepared.key is not None
        latest = await self.store.load(prepared.key)
        built = build(view, latest.event, replace(situation, anchors=latest.anchors))
        job = self._job(prepared, view, situation, built, strategy="manual", focus=command.focus)
        shared = self._shared(prepared, meanwhile, job)
        if shared is None:
            text, compaction = await self._manual_run(prepared, view, situation, latest, built,
                                                      job, line, lease)
            return text, compaction, built
        self._shared_line(line, prepared, shared, job.strategy)
        return manual_failed(shared, waited_for(shared), None, built, situation), "none", built

    async def _manual_run(self, prepared: Prepared, view: View, situation: Situation,
                          latest: ThreadState, built: Built, job: Job, line: RequestLine,
                          lease: LeaseWatch | None) -> tuple[str, str]:
        """`/compact`'s own compaction: the answer's text and its `x-compaction`."""
        try:
            event = await self._compact(job, line, lease)
        except NothingToCompact:
            return manual.nothing_text(built.tokens,
                                       compacted_before=latest.event is not None), "none"
        except BreakerOpen as refused:
            blocked = refused.blocked
            self._failed_line(line, prepared, "breaker_open", blocked.reason, job.strategy,
                              degraded=False, retry_after=blocked.wait_s)
            raise CompactionUnavailable(
                f"Compaction is unavailable right now: {blocked.reason}. The conversation "
                "is unchanged; try again later.", headers=retry_after(blocked)) from None
        except CompactionFailed as failed:
            line.set(compaction_failed=failed.stage)
            return manual_failed(failed, failed.reason, self._breaker_after(prepared), built,
                                  situation), "none"
        except LeasePassed as passed:
            if not passed.last:
                raise  # `in_turns` takes the thread's turn again
            line.set(compaction_failed="lease_lost", compaction_lease_lost=2)
            raise CompactionUnavailable(f"Compaction failed: {passed.reason}. The conversation "
                                        "is unchanged; try again later.",
                                        headers=retry_after(None)) from None
        lead = leading_instructions(view.entries)
        return manual.compacted_text(event.cutoff_index - lead,
                                     len(view.entries) - event.cutoff_index,
                                     event.tokens_before, event.tokens_after), "compacted"

    async def _compact(self, job: Job, line: RequestLine,
                       lease: LeaseWatch | None) -> CompactionEvent:
        """The job's compaction, with a departed client or the shutdown's cut said on the line
        (both are cancellations: no `except Exception` of the callers sees them)."""
        try:
            return await self.compactor.compact_past_client(job, lease)
        except ClientLeft as left:
            _detached_line(line, left)
            raise
        except asyncio.CancelledError as cancelled:
            _cancelled_line(line, cancelled)
            raise


def _guesses_alone(prepared: Prepared, built: Built, th: Thresholds) -> bool:
    """Whether the request would fit the model's limit but for the guessed sizes of references
    to items the proxy never relayed (`Built.guessed`): then a refusal would rest on guesses,
    and it goes up instead; upstream knows the items, and its overflow buys a forced compaction
    (SPEC §9). Not on that forced attempt: upstream has already said it is too long."""
    return (built.guessed > 0 and not prepared.attempt.forced
            and th.fits(built.tokens - built.guessed))


def _cancelled_line(line: RequestLine, cancelled: asyncio.CancelledError) -> None:
    """The shutdown cut the compaction: made all the same when its checkpoint was being
    written, else cancelled."""
    if isinstance(cancelled, CompactionCut) and cancelled.event is not None:
        line.set(compacted=True)
    else:
        line.set(compaction_failed="cancelled")


def _detached_line(line: RequestLine, left: ClientLeft) -> None:
    line.set(compaction_detached=True, compaction_failed=left.stage,
             compacted=True if left.event is not None else None)


def _seq(state: ThreadState | None) -> int:
    return state.event.seq if state is not None and state.event is not None else 0
