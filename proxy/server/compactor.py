"""One LLM compaction, end to end: cut, restore, summarize, post-check, offload, checkpoint.

The pure halves live in `proxy/compaction`; this module does what they cannot: the summarizer's
HTTP calls, the history file, the atomic event write, the per-summarizer circuit breaker, the
per-thread lock, and the `compaction_*` log events. Failure is a value the pipeline acts on
(`CompactionFailed`), never a warning followed by the original over-long request.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from proxy.compaction import apply, breaker, restore, summarizer
from proxy.compaction.cutoff import Cutoff, Previous, choose_cutoff
from proxy.compaction.trigger import Thresholds, thresholds
from proxy.conversation import Api, Entries
from proxy.core.sanitize import Policy, sanitize
from proxy.records import CompactionEvent, ThreadKey
from proxy.server.summarizer_client import run_summary
from proxy.server.upstream import UpstreamClient
from proxy.settings import RestoreSettings, Settings, UpstreamSettings
from proxy.store import HistoryFiles, StateStore
from proxy.tokens.estimate import TokenEstimator


class CompactionFailed(Exception):
    def __init__(self, stage: str, reason: str) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason


class NothingToCompact(Exception):
    """No safe cutoff leaves anything new to summarize."""


@dataclass(frozen=True)
class Job:
    key: ThreadKey
    thread: str  # for the log
    api: Api  # the request's API: the shape of the summary message
    model: str
    upstream: UpstreamSettings  # the request's upstream
    credentials: Mapping[str, str]
    entries: Entries  # the command-free raw list
    ids: Sequence[str]
    previous: Previous | None
    thresholds: Thresholds
    strategy: str  # partial | full | manual
    tokens_before: int
    estimate: Callable[[Entries], int]  # a whole projection, measured like the trigger
    estimator: TokenEstimator
    client_doc: Mapping[str, Any]
    focus: str | None = None
    forced: bool = False  # an upstream overflow bought this compaction


class Compactor:
    def __init__(self, settings: Settings, client: UpstreamClient, store: StateStore,
                 history: HistoryFiles, log: Any, metrics: Any,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.client = client
        self.store = store
        self.history = history
        self.log = log
        self.metrics = metrics
        self.clock = clock
        self._breakers: dict[str, breaker.BreakerState] = {}
        self._locks: weakref.WeakValueDictionary[ThreadKey, asyncio.Lock] = weakref.WeakValueDictionary()

    # ---------------------------------------------------------------- guards

    def lock(self, key: ThreadKey) -> asyncio.Lock:
        found = self._locks.get(key)
        if found is None:
            found = asyncio.Lock()
            self._locks[key] = found
        return found

    def summarizer_of(self, model: str, upstream: UpstreamSettings) -> tuple[str, UpstreamSettings]:
        config = self.settings.compaction.summarizer
        chosen = self.settings.upstreams[config.upstream] if config.upstream else upstream
        return config.model or model, chosen

    def breaker_allows(self, model: str, upstream: UpstreamSettings) -> tuple[bool, float]:
        """Whether a summary may run now; else seconds until it may."""
        key = breaker.breaker_key(*self._summarizer_key(model, upstream))
        state = self._breakers.get(key, breaker.CLOSED)
        allowed, state = breaker.allow(state, time.monotonic())
        self._breakers[key] = state
        return allowed, breaker.retry_after(state, time.monotonic())

    def _summarizer_key(self, model: str, upstream: UpstreamSettings) -> tuple[str, str]:
        summarizer_model, chosen = self.summarizer_of(model, upstream)
        return summarizer_model, chosen.name

    def _record(self, model: str, upstream: UpstreamSettings, ok: bool) -> None:
        key = breaker.breaker_key(*self._summarizer_key(model, upstream))
        state = self._breakers.get(key, breaker.CLOSED)
        self._breakers[key] = (breaker.record_success(state) if ok else
                               breaker.record_failure(state, time.monotonic(),
                                                      self.settings.compaction.breaker))

    # ---------------------------------------------------------------- the compaction

    async def compact(self, job: Job) -> CompactionEvent:
        """Summarize, check, offload and checkpoint; raises CompactionFailed / NothingToCompact."""
        started = time.perf_counter()
        sizes = job.estimator.sizes(job.entries)
        cutoff = choose_cutoff(job.entries, sizes, job.thresholds,
                               "full" if job.strategy == "full" else "partial", job.previous)
        if cutoff is None:
            raise NothingToCompact()
        summary_model, summary_upstream = self.summarizer_of(job.model, job.upstream)
        restored = restore.collect(job.entries, cutoff,
                                   restore_budgets(self.settings.compaction.restore,
                                                   job.thresholds.trigger),
                                   job.estimator.text_tokens, measure=job.estimator.entry_tokens)
        for text, tokens in restored.file_counts:  # the post-check measures these again
            job.estimator.remember(text, tokens)
        plan = summarizer.plan_summary(
            job.entries, cutoff, api=Api(summary_upstream.api), model=summary_model,
            now=self._now(), settings=self.settings.compaction.summarizer,
            window=self._window(summary_model), count=job.estimator.text_tokens,
            measure=job.estimator.entry_tokens, zone_name=self.settings.compaction.timezone,
            focus=job.focus, client_doc=job.client_doc)
        self.log.info("compaction_started", thread=job.thread, strategy=job.strategy,
                      tokens_before=job.tokens_before, cutoff_index=cutoff.index,
                      summarized_messages=len(cutoff.new_entries), summarizer_calls=plan.steps,
                      summarizer_model=summary_model, forced=job.forced)
        outcome = await run_summary(plan, summary_upstream, self.client, job.credentials,
                                    self.settings.compaction.summarizer.timeout_s)
        self._record(job.model, job.upstream, outcome.text is not None)
        if outcome.text is None:
            raise self._failed(job, "summarize", outcome.error)
        finished = apply.finish(
            job.entries, job.ids, cutoff, outcome.text, restored, estimate=job.estimate,
            measure=job.estimator.entry_tokens, trigger=job.thresholds.trigger,
            limit=job.thresholds.limit, tokens_before=job.tokens_before, strategy=job.strategy,
            created_at=self.clock(), model=job.model, summarizer_model=summary_model)
        if not finished.verdict.ok or finished.event is None:
            raise self._failed(job, "post_check", finished.verdict.reason, finished.verdict)
        event = await self._checkpoint(job, cutoff, finished.event)
        self._completed(job, event, finished, started, outcome.duration_ms)
        return event

    async def _checkpoint(self, job: Job, cutoff: Cutoff, event: CompactionEvent) -> CompactionEvent:
        path, error = await self._offload(job, cutoff)
        event = replace(event, history_file=path, offload_error=error, api=job.api.value)
        return await self.store.add_event(job.key, event)

    async def _offload(self, job: Job, cutoff: Cutoff) -> tuple[str | None, str | None]:
        indexes = list(cutoff.new_entries)
        clean = sanitize([job.entries[i] for i in indexes], Policy.PRIVATE_FREE)
        records = [{"id": job.ids[indexes[k]], "index": indexes[k], "message": entry.raw}
                   for k, entry in zip(clean.kept, clean.entries)]
        try:
            return await self.history.append_async(job.key, records, self.clock()), None
        except OSError as exc:
            reason = f"{type(exc).__name__}: {exc.strerror or exc}"
            self.log.warning("compaction_failed", thread=job.thread, stage="offload",
                             error=reason, degraded=True)
            return None, reason

    def refused(self, job: Job, reason: str) -> None:
        """Record a compaction that was needed but had nothing left to summarize: a failed
        post-check like any other (SPEC §5: a recent message alone that cannot fit)."""
        self._failed(job, "post_check", reason)

    def _failed(self, job: Job, stage: str, reason: str, verdict: Any = None) -> CompactionFailed:
        self.log.warning("compaction_failed", thread=job.thread, stage=stage, error=reason,
                         degraded=stage != "post_check", strategy=job.strategy)
        if self.metrics is not None:
            self.metrics.compactions.labels(job.strategy, f"failed_{stage}").inc()
        failed = CompactionFailed(stage, reason)
        failed.verdict = verdict  # type: ignore[attr-defined]
        return failed

    def _completed(self, job: Job, event: CompactionEvent, finished: apply.Finished,
                   started: float, summarizer_ms: float) -> None:
        self.log.info("compaction_completed", thread=job.thread, strategy=event.strategy,
                      tokens_before=event.tokens_before, tokens_after=event.tokens_after,
                      cutoff_index=event.cutoff_index, cutoff_message_id=event.cutoff_message_id,
                      summary_tokens=finished.summary_tokens, restored=len(event.restore_messages),
                      restore_tokens=finished.restore_tokens,
                      duration_ms=round((time.perf_counter() - started) * 1000, 2),
                      summarizer_ms=summarizer_ms, history_file=event.history_file,
                      offload_error=event.offload_error, seq=event.seq, forced=job.forced)
        if self.metrics is not None:
            self.metrics.compactions.labels(event.strategy, "completed").inc()
            self.metrics.tokens_saved.labels("llm").inc(max(0, event.tokens_before - event.tokens_after))

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


# Restored material may take at most these shares of the trigger: configured budgets are
# absolute, and a small model's window must still hold the summary and the kept tail.
_RESTORE_SHARE = 0.15
_USERS_SHARE = 0.08


def restore_budgets(config: RestoreSettings, trigger: int) -> RestoreSettings:
    total = min(config.total_tokens, int(trigger * _RESTORE_SHARE))
    return replace(config, total_tokens=total, per_file_tokens=min(config.per_file_tokens, total),
                   user_messages_tokens=min(config.user_messages_tokens,
                                            int(trigger * _USERS_SHARE)))
