"""How one compaction can end other than with its checkpoint: the values the pipeline acts on.

`proxy/server/compactor.py` raises them; `proxy/server/compaction_flow.py` turns each into what
the client gets (forwarded with the cheap stages, a 503, a 400, the request ended as cancelled).
"""

from __future__ import annotations

import asyncio

from proxy.compaction import breaker
from proxy.compaction.postcheck import Verdict
from proxy.records import CompactionEvent
from proxy.server.client_owned import Refusal
from proxy.server.drain import CUT


class CompactionFailed(Exception):
    def __init__(self, stage: str, reason: str, verdict: Verdict | None = None,
                 by_inputs: bool = False, refusal: Refusal | None = None) -> None:
        super().__init__(f"{stage}: {reason}")
        self.stage = stage
        self.reason = reason
        self.verdict = verdict  # a failed post-check's, for the client's error
        # Decided by what the compaction was given and the configuration, so a retry of it ends
        # the same (a plan, or a re-plan for the summarizer's real window, over `max_calls`; a
        # post-check certain to fail; the content refused by the upstream's content policy):
        # the summarizer is not unhealthy.
        self.by_inputs = by_inputs
        # The summarizer's upstream refused or rate-limited the request's own credential
        # (`client_owned.client_refusal`): the client's to fix or wait out.
        self.refusal = refusal


class NothingToCompact(Exception):
    """No safe cutoff leaves anything new to summarize."""


class ClientLeft(asyncio.CancelledError):
    """The client went away while its compaction ran; raised once that compaction, which went
    on without it, has ended. A cancellation: the request ends as one its client cancelled."""

    def __init__(self, event: CompactionEvent | None, stage: str | None) -> None:
        super().__init__("the client went away; its compaction ran on")
        self.event = event  # the checkpoint written, if any
        self.stage = stage  # the stage that failed, if one did


class CompactionCut(asyncio.CancelledError):
    """The shutdown's cut reached a compaction whose client was still there; raised once that
    compaction has ended. `event`: the checkpoint written all the same (the cut came while it
    was being written, which completes), else None."""

    def __init__(self, event: CompactionEvent | None) -> None:
        super().__init__(CUT)  # the drain's own cut, as `is_cut` knows it
        self.event = event


class BreakerOpen(Exception):
    """The summarizer's breaker refused this attempt (it opened, or a trial began, while the
    request waited for the thread's lock)."""

    def __init__(self, blocked: breaker.Blocked) -> None:
        super().__init__(blocked.reason)
        self.blocked = blocked


class LeasePassed(Exception):
    """The thread's compaction lease passed to another proxy instance while this compaction
    ran (`proxy/server/thread_lease.py`): it stopped, nothing of it written. `last`: the
    request's second turn, which degrades instead of taking a third."""

    def __init__(self, reason: str, last: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.last = last
