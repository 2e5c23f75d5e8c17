"""What the log hears of failed background writes: counts and error types, rate-limited.

A full disk fails every batch the writer drains, one every few milliseconds under load: one
`state_write_failed` line per `REPORT_INTERVAL_S` says how many writes were lost since the
previous line. Only the error's type and SQLite code are kept, never its text or the write's
data (a write carries client-derived values). Pure: the caller passes the clock and logs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REPORT_INTERVAL_S = 10.0


def _ignored(*_: int) -> None:
    return None


@dataclass(frozen=True)
class FailureHooks:
    """Whom the store tells of each failure as it happens, unthrottled (the server's metrics;
    the store never imports the server). Called on the store's worker thread too."""

    writes_lost: Callable[[int], None] = _ignored  # how many writes did not reach the file
    damaged: Callable[[], None] = _ignored  # a statement met a damaged page or row


NO_HOOKS = FailureHooks()


class WriteFailures:
    def __init__(self, interval_s: float = REPORT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._unreported = 0
        self._error: dict[str, Any] = {}
        self._reported_at: float | None = None

    def record(self, count: int, error: Exception, now: float) -> dict[str, Any] | None:
        """Note `count` lost writes; the fields of a line to log now, or None (rate limit)."""
        self._unreported += count
        self._error = describe(error)
        if self._reported_at is not None and now - self._reported_at < self.interval_s:
            return None
        self._reported_at = now
        return self.take()

    def take(self) -> dict[str, Any] | None:
        """The failures not yet reported, as log fields, and forget them (for a last line at
        close); None when there are none."""
        if not self._unreported:
            return None
        fields = {"failed": self._unreported, **self._error}
        self._unreported = 0
        return fields


def describe(error: Exception) -> dict[str, Any]:
    """An error as log fields: its type, and its SQLite code when it has one."""
    described: dict[str, Any] = {"error": type(error).__name__}
    code = getattr(error, "sqlite_errorname", None)  # "SQLITE_FULL": a code, not a message
    if code:
        described["sqlite_error"] = code
    return described
