"""One LLM compaction, end to end: cut, restore, summarize, post-check, offload, checkpoint.

The pure halves live in `proxy/compaction`; this module does what they cannot: the summarizer's
HTTP calls, the history file, the atomic event write, the per-summarizer circuit breaker, the
per-thread lock, and the `compaction_*` log events (written by `compaction_events.py`). Failure is a value the pipeline acts on
(`CompactionFailed`, `BreakerOpen`), never a warning followed by the original over-long request.

Every `compaction_started` is followed by one `compaction_completed` or `compaction_failed`,
a cancelled one included (stage `cancelled`), and every attempt the breaker let run settles
it: success, failure, or abandoned. A compaction whose client leaves goes on to its end
(`compact_past_client`): summarizer tokens already spent are not thrown away, and the client's
retry, queued on the thread's lock, finds the checkpoint. Only the shutdown's cut cancels it,
and a lost lease (`proxy/server/thread_lease.py`) while the summarizer works: `LeasePassed`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from functools import partial
from typing import Any
from zoneinfo import ZoneInfo

from proxy.anchors import with_references
from proxy.compaction import apply, breaker, restore, summarizer
from proxy.compaction.budgets import TailCap, restore_budgets, tail_cap
from proxy.compaction.cutoff import Cutoff, choose_cutoff
from proxy.compaction.summarizer import SummaryPlan
from proxy.compaction.trigger import thresholds
from proxy.conversation import Api, Kind, leading_instructions
from proxy.core.sanitize import Policy, sanitize
from proxy.records import CompactionEvent, ThreadKey
from proxy.server.breakers import SummarizerBreakers
from proxy.server.client_owned import (client_refusal, content_refused, replan_over_max_calls,
                                       summarizer_verdict, window_setting)
from proxy.server.compaction_errors import (BreakerOpen, ClientLeft, CompactionCut,
                                           CompactionFailed, LeasePassed, NothingToCompact)
from proxy.server.compaction_events import CompactionEvents
from proxy.server.compaction_job import Job
from proxy.server.detach import outlive_client, to_the_end
from proxy.server.request_line import clipped
from proxy.server.summarizer_client import SummaryOutcome, run_replanning, too_many_calls
from proxy.server.thread_lease import LeaseWatch, is_lease_lost, stopped_on_loss
from proxy.server.turns import SharedFailure, ThreadTurns
from proxy.server.upstream import UpstreamClient
from proxy.settings import RestoreSettings, Settings, UpstreamSettings
from proxy.store import History, StateStore
from proxy.store.base import LeaseLost, StoreError
from proxy.store.history import Appended


class Compactor:
    def __init__(self, settings: Settings, client: UpstreamClient, store: StateStore,
                 history: History, log: Any, metrics: Any,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.client = client
        self.store = store
        self.history = history
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self.breakers = SummarizerBreakers(settings.compaction.breaker)
        self.turns = ThreadTurns()  # one compaction per thread at a time
        self.events = CompactionEvents(log, metrics)

    # ---------------------------------------------------------------- guards

    def running(self, key: ThreadKey) -> bool:
        """A compaction of this thread holds its lock (perhaps detached, or the breaker's trial)."""
        return self.turns.running(key)

    def summarizer_of(self, model: str, upstream: UpstreamSettings) -> tuple[str, UpstreamSettings]:
        config = self.settings.compaction.summarizer
        chosen = self.settings.upstreams[config.upstream] if config.upstream else upstream
        return config.model or model, chosen

    def breaker_blocked(self, model: str, upstream: UpstreamSettings) -> breaker.Blocked | None:
        """None when a summary may be tried now; else how long to wait, and why. Only looks:
        the trial, if any, is claimed by `compact` once the request holds the thread's lock."""
        return self.breakers.blocked(self._breaker_key(model, upstream))

    def _breaker_key(self, model: str, upstream: UpstreamSettings) -> breaker.BreakerKey:
        summarizer_model, chosen = self.summarizer_of(model, upstream)
        return breaker.breaker_key(summarizer_model, chosen.name)

    def _claim(self, job: Job) -> float | None:
        """The half-open trial's stamp when this attempt is it; BreakerOpen when the breaker
        refuses it. A forced compaction (an upstream overflow) bypasses it (SPEC §9)."""
        if job.forced:
            return None
        blocked, trial = self.breakers.claim(self._breaker_key(job.model, job.upstream))
        if blocked is not None:
            raise BreakerOpen(blocked)
        return trial

    def _settle(self, job: Job, trial: float | None, healthy: bool | None) -> None:
        self.breakers.settle(self._breaker_key(job.model, job.upstream), trial, healthy)

    # ---------------------------------------------------------------- the compaction

    async def compact_past_client(self, job: Job,
                                  lease: LeaseWatch | None = None) -> CompactionEvent:
        """`compact`, run to its end even when the client leaves meanwhile: then, once it has
        ended, `ClientLeft`. The caller (with the thread's lock it holds) waits until then."""
        finished, left, cut = await outlive_client(self.compact(job, lease),
                                                   lambda task: self._detach(job, task))
        error = None if finished.cancelled() else finished.exception()
        turn = self.turns.of(job.key)  # what the requests waiting their turn learn
        if isinstance(error, CompactionFailed):
            turn.failed(SharedFailure(error.stage, error.reason, job.inputs, error.verdict,
                                      error.by_inputs, error.refusal))
        elif error is None and not finished.cancelled():
            turn.succeeded()
        if left:
            raise self._left(job, finished)
        if cut:
            raise CompactionCut(finished.result() if error is None and not finished.cancelled()
                                else None)
        return finished.result()

    def _detach(self, job: Job, task: asyncio.Task[CompactionEvent]) -> None:
        self.events.detached.add(task)
        task.add_done_callback(self.events.detached.discard)
        self.log.info("compaction_detached", **job.who, strategy=job.strategy)

    def _left(self, job: Job, finished: asyncio.Task[CompactionEvent]) -> ClientLeft:
        """How the compaction of a client that left ended, for its request's line. The
        compaction logged its own outcome, but for an error no stage names: with no handler
        left to raise it to, that one is logged here."""
        if finished.cancelled():
            return ClientLeft(None, "cancelled")
        error = finished.exception()
        if error is None:
            return ClientLeft(finished.result(), None)
        if isinstance(error, CompactionFailed):
            return ClientLeft(None, error.stage)
        if isinstance(error, LeasePassed):
            return ClientLeft(None, "lease_lost")
        if not isinstance(error, (NothingToCompact, BreakerOpen)):
            self.log.error("unhandled_error", **job.who, detached=True, exc_info=error)
        return ClientLeft(None, None)

    async def compact(self, job: Job, lease: LeaseWatch | None = None) -> CompactionEvent:
        """Summarize, check, offload and checkpoint; raises CompactionFailed, NothingToCompact
        or BreakerOpen (before anything is logged), or LeasePassed when `lease` was lost."""
        started = time.perf_counter()
        sizes = with_references(job.entries, job.estimator.sizes(job.entries), job.anchors,
                                job.references)
        budgets = restore_budgets(self.settings.compaction.restore, job.thresholds.trigger)
        cutoff = choose_cutoff(job.entries, sizes, job.thresholds,
                               "full" if job.strategy == "full" else "partial", job.previous,
                               cap=self._tail_cap(job, budgets, sizes))
        if cutoff is None:
            raise NothingToCompact()
        summary_model, summary_upstream = self.summarizer_of(job.model, job.upstream)
        restored = restore.collect(job.entries, cutoff, budgets, job.estimator.text_tokens,
                                   measure=job.estimator.entry_tokens)
        self._refuse_hopeless(job, cutoff, restored)
        window = self._window(summary_model)
        plan_for = partial(self._plan, job, cutoff, summary_model, summary_upstream)
        plan = plan_for(window)
        allowed = self.settings.compaction.summarizer.max_calls
        if plan.steps > allowed:
            # Refused before a call: the summarizer did nothing wrong, its breaker is not asked.
            raise self.events.failed(job, "summarize", too_many_calls(plan.steps, allowed),
                               by_inputs=True)
        trial = self._claim(job)
        healthy: bool | None = None
        try:
            self.log.info("compaction_started", **job.who, strategy=job.strategy,
                          tokens_before=job.tokens_before, cutoff_index=cutoff.index,
                          summarized_messages=len(cutoff.new_entries),
                          summarizer_calls=plan.steps, summarizer_model=clipped(summary_model),
                          forced=job.forced, **({"stale_checkpoint": True} if job.stale else {}))
            outcome = await self._summarize_held(job, lease, plan, window, plan_for,
                                                 summary_upstream)
            refusal = client_refusal(outcome.refusal, summary_upstream)
            by_inputs = outcome.replan_calls > 0 or content_refused(refusal)
            healthy = summarizer_verdict(outcome.text is not None,
                                         owned=refusal is not None or by_inputs)
            if outcome.text is None:
                raise self.events.failed(job, "summarize", outcome.error, refusal=refusal,
                                   by_inputs=by_inputs)
            try:
                finished = self._finish(job, cutoff, outcome.text, restored, summary_model)
            except CompactionFailed as failed:
                healthy = failed.stage != "summarize"
                raise
            healthy = None  # until the write says
            written, cancelled = await to_the_end(self._checkpoint(job, cutoff, finished.event,
                                                                   lease))
            error = written.exception()
            healthy = error is None or isinstance(error, LeasePassed)  # the summary came
            if error is None:
                self.events.completed(job, written.result(), finished, started, outcome.duration_ms)
            elif cancelled:
                raise asyncio.CancelledError()
            return written.result()  # written: a cancellation that came meanwhile came too late
        finally:
            self._settle(job, trial, healthy)

    def _tail_cap(self, job: Job, budgets: RestoreSettings, sizes: Sequence[int]) -> TailCap:
        """Room under the trigger for the kept tail once instructions, tools, the longest
        summary and the restores have theirs (`budgets.tail_cap`)."""
        entries = job.entries
        lead = leading_instructions(entries)
        latest = next((i for i in range(len(entries) - 1, lead - 1, -1)
                       if entries[i].kind is Kind.USER), -1)
        return tail_cap(job.thresholds.trigger, job.estimate(entries[:lead]),
                        job.estimator.margin, self.settings.compaction.summarizer.max_output_tokens,
                        budgets, latest, sizes[latest] if latest >= 0 else 0)

    def _refuse_hopeless(self, job: Job, cutoff: Cutoff, restored: restore.Restored) -> None:
        """The post-check's failure before the summarizer is paid, when no summary can pass it
        (what must stay verbatim is over the trigger already)."""
        verdict = apply.hopeless(job.entries, job.ids, cutoff, restored, estimate=job.estimate,
                                 measure=job.estimator.entry_tokens,
                                 trigger=job.thresholds.trigger, limit=job.thresholds.limit,
                                 tokens_before=job.tokens_before, strategy=job.strategy,
                                 model=job.model)
        if verdict is not None:
            raise self.events.failed(job, "post_check", f"{verdict.reason} (known before summarizing: "
                               "no summary was asked for)", verdict, by_inputs=True)

    def _plan(self, job: Job, cutoff: Cutoff, model: str, upstream: UpstreamSettings,
              window: int) -> SummaryPlan:
        return summarizer.plan_summary(
            job.entries, cutoff, api=Api(upstream.api), model=model, now=self._now(),
            settings=self.settings.compaction.summarizer, window=window,
            count=job.estimator.text_tokens, measure=job.estimator.entry_tokens,
            zone_name=self.settings.compaction.timezone, focus=job.focus, client_doc=job.client_doc)

    def _finish(self, job: Job, cutoff: Cutoff, summary: str, restored: restore.Restored,
                summary_model: str) -> apply.Finished:
        """The summary spliced in and post-checked; raises CompactionFailed (post_check, or
        summarize for a summary no smaller)."""
        finished = apply.finish(
            job.entries, job.ids, cutoff, summary, restored, estimate=job.estimate,
            measure=job.estimator.entry_tokens, trigger=job.thresholds.trigger,
            limit=job.thresholds.limit, tokens_before=job.tokens_before, strategy=job.strategy,
            created_at=self.clock(), model=job.model, summarizer_model=summary_model)
        verdict = finished.verdict
        if verdict.summary_grew and job.tokens_before > job.thresholds.trigger:
            # Over the trigger the summarized part is most of the context: a summary no smaller
            # failed like an empty one (SPEC §5); degrade and count it (§9), no 400.
            raise self.events.failed(job, "summarize", verdict.reason)
        if not verdict.ok or finished.event is None:
            raise self.events.failed(job, "post_check", verdict.reason, verdict)
        return finished

    async def _summarize(self, job: Job, plan: SummaryPlan, window: int,
                         plan_for: Callable[[int], SummaryPlan],
                         upstream: UpstreamSettings) -> SummaryOutcome:
        config = self.settings.compaction.summarizer
        try:
            outcome = await run_replanning(
                plan, window, plan_for, config.max_calls,
                lambda size: self.log.info("summarizer_overflow", **job.who, retry_window=size),
                upstream, self.client, job.credentials, config.timeout_s)
        except asyncio.CancelledError as cancelled:
            if not is_lease_lost(cancelled):  # that one is `_summarize_held`'s to log
                self.events.failed(job, "cancelled", "the compaction was cancelled while the "
                             "summarizer worked (the shutdown grace ended); nothing was written",
                             degraded=False)
            raise
        if outcome.replan_calls:  # the error names the window setting the operator can fix
            configured = window_setting(self.settings.profile(plan.model), self._window(plan.model))
            outcome = replace(outcome, error=replan_over_max_calls(
                outcome.replan_calls, config.max_calls, configured))
        return outcome

    async def _summarize_held(self, job: Job, lease: LeaseWatch | None, plan: SummaryPlan,
                              window: int, plan_for: Callable[[int], SummaryPlan],
                              upstream: UpstreamSettings) -> SummaryOutcome:
        """`_summarize`, its call cancelled when the thread's lease is lost meanwhile (another
        instance took the thread over, and this checkpoint would be refused): LeasePassed."""
        try:
            with stopped_on_loss(lease):
                outcome = await self._summarize(job, plan, window, plan_for, upstream)
        except asyncio.CancelledError as cancelled:
            if not is_lease_lost(cancelled):
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # taken back: it ends as LeasePassed
        else:
            if lease is None or not lease.lost.done():
                return outcome
        raise self.events.passed(job, lease, "while the summarizer worked (its call was cancelled)")

    async def _checkpoint(self, job: Job, cutoff: Cutoff, event: CompactionEvent,
                          lease: LeaseWatch | None) -> CompactionEvent:
        """Offload, then write the event; a checkpoint that cannot be written takes its history
        lines back, so the next attempt does not offload them a second time. A kill in between
        leaves them in: the next attempt cuts them off first (`_offload`)."""
        try:
            await self.store.lease_check(job.key)
        except LeaseLost as exc:  # the history stays as it is
            raise self.events.passed(job, lease, "before its checkpoint was written") from exc
        except Exception as exc:  # or Redis cannot say
            raise self.events.failed(job, "checkpoint", "the checkpoint could not be written: "
                               f"{_describe(exc)}") from exc
        committed = await self._committed_end(job)
        appended, error, end = await self._offload(job, cutoff, committed)
        event = replace(event, history_file=appended.path if appended else None, history_end=end,
                        offload_error=error, api=job.api.value, trigger=job.thresholds.trigger)
        try:
            return await self.store.add_event(job.key, event)
        except Exception as exc:  # whatever the store raised, the summary is lost
            reason = f"the checkpoint could not be written: {_describe(exc)}"
            if appended is not None and isinstance(exc, StoreError) and exc.keeps_history_lines:
                reason += "; its history lines stay for the next compaction to account for"
            elif appended is not None:
                try:
                    await self.history.retract_async(appended)
                except OSError as undo:
                    reason += f"; its history lines stay in the file ({_describe(undo)})"
            if isinstance(exc, LeaseLost):  # it stalled between the check and the write
                raise self.events.passed(job, lease, "as its checkpoint was written") from exc
            raise self.events.failed(job, "checkpoint", reason) from exc

    async def _committed_end(self, job: Job) -> int | None:
        try:
            latest = (await self.store.load(job.key)).event
        except Exception as exc:  # nothing is written yet: this attempt fails whole
            raise self.events.failed(job, "checkpoint", "the thread's last checkpoint could not be "
                               f"read: {_describe(exc)}") from exc
        return committed_end(latest)

    async def _offload(self, job: Job, cutoff: Cutoff,
                       committed: int | None) -> tuple[Appended | None, str | None, int | None]:
        """Cut off what no committed checkpoint accounts for, then append the summarized
        messages; returns where they went, the error if they did not, and the file size the
        new checkpoint accounts for (`history_end`)."""
        indexes = list(cutoff.new_entries)
        clean = sanitize([job.entries[i] for i in indexes], Policy.PRIVATE_FREE, upstream=False)
        records = [{"id": job.ids[indexes[k]], "index": indexes[k], "message": entry.raw}
                   for k, entry in zip(clean.kept, clean.entries)]
        end = committed
        try:
            if end is not None:
                end = await self._discard_tail(job, end)
            appended = await self.history.offload_async(job.key, records, self.clock())
            return appended, None, appended.end
        except OSError as exc:
            reason = _describe(exc)
            # The summary goes on (SPEC §5): the request is not degraded.
            self.log.warning("compaction_failed", **job.who, stage="offload",
                             error=reason, degraded=False, **self.events.detached_field())
            self.events.count_failed(job, "offload")
            return None, reason, end  # anything ours left lies past it, for the next cut

    async def _discard_tail(self, job: Job, end: int) -> int:
        discarded = await self.history.discard_tail_async(job.key, end)
        if discarded.bytes:
            self.log.warning("history_tail_discarded", **job.who,
                             bytes=discarded.bytes, lines=discarded.lines,
                             **{f"kept_{self.history.unit}": end})
        return discarded.size

    def refused(self, job: Job, reason: str) -> None:
        """Record a compaction that was needed but had nothing left to summarize: a failed
        post-check like any other (SPEC §5: a recent message alone that cannot fit)."""
        self.events.failed(job, "post_check", reason)

    def _now(self) -> datetime:
        zone = self.settings.compaction.timezone
        moment = datetime.fromtimestamp(self.clock(), ZoneInfo(zone) if zone else None)
        return moment if zone else moment.astimezone()

    def _window(self, model: str) -> int:
        """The summarizer's usable input, measured as the main model's is: its own output
        reservation comes off a total `context_window` only, never off `max_input_tokens`."""
        compaction = self.settings.compaction
        return thresholds(compaction, self.settings.profile(model),
                          compaction.summarizer.max_output_tokens).limit


def committed_end(latest: CompactionEvent | None) -> int | None:
    """The history file size the thread's committed checkpoints account for (None: unknown, cut
    nothing). Without a checkpoint it is 0: only a compaction appends, and one whose checkpoint
    failed takes its lines back, so any line there was left by a kill. A checkpoint stored
    before `history_end` was recorded accounts for lines somewhere in the file and nothing says
    where they end: the file stays as it is, since a copy left by one kill costs less than a
    committed line lost; the next checkpoint records its end again."""
    if latest is None:
        return 0
    return latest.history_end


def _describe(exc: BaseException) -> str:
    detail = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
    return f"{type(exc).__name__}: {detail}"
