"""What one compaction is given (`Job`): the request's thread, messages and measures, and how
the summary is asked for. `proxy/server/compactor.py` runs it."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.anchors import NO_SIZES, ReferenceSizes
from proxy.compaction.cutoff import Previous
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Api, Entries
from proxy.records import Anchor, ThreadKey
from proxy.settings import UpstreamSettings
from proxy.tokens.estimate import TokenEstimator


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
    anchors: tuple[Anchor, ...] = ()  # the thread's: what an `item_reference` weighs
    stale: bool = False  # the thread's checkpoint did not apply (`Built.stale`)
    # The tenant's record of relayed items: what an `item_reference` weighs first.
    references: ReferenceSizes = NO_SIZES

    @property
    def who(self) -> dict[str, str]:
        """The log fields that name the thread: its id and its tenant's digest (two tenants
        may use the same id)."""
        return {"thread": self.thread, "tenant": self.key.tenant}

    @property
    def inputs(self) -> tuple[Any, ...]:
        """What decides the post-check, but for the summary's own words: the checkpoint it
        builds on, the messages (content digests), what they were measured as, against what,
        and how the summary is asked for. Equal inputs choose the same cut and restores."""
        return (self.previous, self.api, self.model, self.upstream.name, self.strategy,
                self.focus, self.thresholds, self.tokens_before, tuple(self.ids))

    @property
    def fits_without_compaction(self) -> bool:
        """Whether a failed compaction still lets the request go on with the cheap stages.
        After an upstream overflow the same projection must not go up again."""
        return self.thresholds.fits(self.tokens_before) and not self.forced
