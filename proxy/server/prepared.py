"""What one attempt at a request carries from `prepare` to the relay and back."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from aiohttp import web

from proxy.compaction.overflow import Retry
from proxy.conversation import Entries, Entry
from proxy.core.sanitize import Policy
from proxy.inbound import Inbound
from proxy.records import ThreadKey
from proxy.server.headers import CREDENTIAL_SCOPE
from proxy.server.relay import PlainTap, StreamTap
from proxy.settings import UpstreamSettings
from proxy.threads import ThreadIdentity
from proxy.tokens.estimate import TokenEstimator


@dataclass(frozen=True)
class Attempt:
    """How this attempt differs from a plain one: a retry after an upstream rejection, or
    a request prepared with the fix its thread's upstream needed before (`retry_lessons`)."""

    forced: bool = False  # an overflow buys one compaction, breaker and hysteresis bypassed
    policy: Policy | None = None
    keep_loop: bool = False
    # What the retry changes after the cascade: adds where the current loop lacks it
    # (`proxy.core.placeholders`), or takes out (`proxy.core.unreasoned`).
    placeholders: Callable[[Sequence[Entry]], tuple[Entries, int]] | None = None
    reason: str | None = None
    fix: Retry | None = None  # the rejected private state this attempt's changes answer
    lesson: bool = False  # `fix` applied at once, remembered from the thread's earlier retry

    @property
    def retry(self) -> bool:
        return self.reason is not None


@dataclass
class Prepared:
    inbound: Inbound
    identity: ThreadIdentity
    upstream: UpstreamSettings
    client_headers: Mapping[str, str]  # the client's request headers
    body: bytes
    attempt: Attempt = field(default_factory=Attempt)
    key: ThreadKey | None = None
    context: bytes = b""
    estimator: TokenEstimator | None = None
    # What `prepare` finds out, set on the way. Not `__init__` arguments: one is made for every
    # request, and until set these read their class-level defaults (immutable: never shared
    # state).
    response_headers: Mapping[str, str] | None = field(default=None, init=False)
    answer: web.StreamResponse | None = field(default=None, init=False)
    stream_tap: Callable[[], StreamTap] = field(default=PlainTap, init=False)
    projection: Entries = field(default=(), init=False)
    estimate: int | None = field(default=None, init=False)
    untouched: bool = field(default=False, init=False)  # sent as it came (`server/untouched`)
    waits_end: float | None = field(default=None, init=False)  # `shared_waits.within`

    def credentials(self, names: Sequence[str]) -> Mapping[str, str]:
        """The credential headers the client sent (`names`: `threads.credential_headers`), and
        those that scope its credential (a summary asked for with the client's key is billed
        where its request is), for a summary call made on its behalf. Built when asked: only a
        compaction needs them, not every request."""
        headers = self.client_headers
        return {name: headers[name] for name in (*names, *CREDENTIAL_SCOPE) if name in headers}
