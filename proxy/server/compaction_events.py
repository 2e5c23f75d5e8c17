"""The `compaction_*` events of one compaction and their counts: what `Compactor` logs when a
compaction completes, fails or stops, and whether its client has left (`detached`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from proxy.compaction import apply
from proxy.compaction.postcheck import Verdict
from proxy.records import CompactionEvent
from proxy.server.client_owned import Refusal
from proxy.server.compaction_errors import CompactionFailed, LeasePassed
from proxy.server.compaction_job import Job
from proxy.server.thread_lease import LeaseWatch


class CompactionEvents:
    def __init__(self, log: Any, metrics: Any) -> None:
        self.log = log
        self.metrics = metrics
        self.detached: set[asyncio.Task[CompactionEvent]] = set()  # clients gone, still running

    def detached_field(self) -> dict[str, bool]:
        """`detached=true` on the events of a compaction whose client has left."""
        return {"detached": True} if asyncio.current_task() in self.detached else {}

    def failed(self, job: Job, stage: str, reason: str, verdict: Verdict | None = None,
               degraded: bool | None = None, by_inputs: bool = False,
               refusal: Refusal | None = None) -> CompactionFailed:
        self.log.warning("compaction_failed", **job.who, stage=stage, error=reason,
                         degraded=_forwarded_anyway(job, stage) if degraded is None else degraded,
                         strategy=job.strategy, **self.detached_field())
        self.count_failed(job, stage)
        return CompactionFailed(stage, reason, verdict, by_inputs, refusal)

    def passed(self, job: Job, lease: LeaseWatch | None, when: str) -> LeasePassed:
        """The compaction stopped because its lease passed to another instance; nothing of it
        is written. Not the summarizer's failure, and not one to share with waiters."""
        last = lease is None or lease.last
        detached = self.detached_field()
        reason = (f"the thread's compaction lease passed to another proxy instance {when}: "
                  "this instance stalled longer than state.redis.lease_s")
        self.log.warning("compaction_failed", **job.who, stage="lease_lost", error=reason,
                         degraded=_forwarded_anyway(job, "lease_lost") if last else False,
                         strategy=job.strategy, **detached,
                         **({} if last or detached else {"retrying": True}))
        self.count_failed(job, "lease_lost")
        return LeasePassed(reason, last)

    def count_failed(self, job: Job, stage: str) -> None:
        if self.metrics is not None:
            self.metrics.observe_compaction_failed(job.strategy, stage)

    def completed(self, job: Job, event: CompactionEvent, finished: apply.Finished,
                  started: float, summarizer_ms: float) -> None:
        self.log.info("compaction_completed", **job.who, strategy=event.strategy,
                      tokens_before=event.tokens_before, tokens_after=event.tokens_after,
                      cutoff_index=event.cutoff_index, cutoff_message_id=event.cutoff_message_id,
                      summary_tokens=finished.summary_tokens, restored=len(event.restore_messages),
                      restore_tokens=finished.restore_tokens,
                      duration_ms=round((time.perf_counter() - started) * 1000, 2),
                      summarizer_ms=summarizer_ms, history_file=event.history_file,
                      offload_error=event.offload_error, seq=event.seq, forced=job.forced,
                      **self.detached_field())
        if self.metrics is not None:
            self.metrics.compactions.labels(event.strategy, "completed").inc()
            self.metrics.observe_saved("llm", event.tokens_before - event.tokens_after)


def _forwarded_anyway(job: Job, stage: str) -> bool:
    """Whether the request goes on without this compaction (`degraded`), as the flow decides:
    a failed post-check and `/compact` never forward the request, whatever the size."""
    return stage != "post_check" and job.strategy != "manual" and job.fits_without_compaction
