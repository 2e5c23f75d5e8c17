"""The one log line each request ends with, whatever way it ends.

Handlers add facts as they learn them; leaving the `with` block writes the line, with the status
the client got: the upstream's, the proxy's own error status, 499 when the client went away
(not once it had the answer's last event: `client_left_after_end`), 503 when the shutdown grace
ended before the answer started.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from types import TracebackType
from typing import Any

from proxy.errors import ProxyError, ShuttingDown
from proxy.server.drain import is_cut
from proxy.server.logs import write_info

CLIENT_CLOSED = 499
_CLIPPED_CHARS = 256
_INFO = logging.INFO


def clipped(text: str) -> str:
    """A client's string (its `model`) for the line: any length may come, and a huge one
    would make every line of that client as huge, which log shippers split or drop."""
    if len(text) <= _CLIPPED_CHARS:
        return text
    return f"{text[:_CLIPPED_CHARS]}... ({len(text)} chars)"


class RequestLine:
    def __init__(self, log: Any, metrics: Any = None, kind: str = "other", **fields: Any) -> None:
        self._log = log
        self._metrics = metrics
        self._kind = kind
        self._started = self._upstream_started = time.perf_counter()
        self.fields: dict[str, Any] = {"status": None, **fields}
        # `set(**facts)` adds facts to the line. A handler sets some six times a request: the
        # dict's own `update`, bound here, does it without a Python frame each time.
        self.set: Callable[..., None] = self.fields.update

    @property
    def started(self) -> float:
        return self._started

    def calling_upstream(self) -> None:
        """The upstream call starts now: what came before (reading, compacting) is the proxy's."""
        self._upstream_started = time.perf_counter()

    def mark_upstream(self) -> None:
        """The upstream's response head arrived: `upstream_ms` is the wait since the call."""
        self.fields["upstream_ms"] = round((time.perf_counter() - self._upstream_started) * 1000, 2)

    def __enter__(self) -> RequestLine:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self._settle(exc)
        fields = self.fields
        # The line is written here, not by a method of its own: every request passes.
        enabled = getattr(self._log, "is_enabled_for", None)
        if enabled is None or enabled(_INFO):  # below the level: skip building it
            # Measured here, not on entry: a line below the level needs no duration.
            fields["duration_ms"] = round((time.perf_counter() - self._started) * 1000, 2)
            # Facts set to None are left out, deleted from a copy (the line's facts stay as
            # set): of some 30 facts a few are None, and a new dict built of the others
            # (`dict(compress(...))`) cost twice as many instructions.
            line = fields.copy()
            for name in [name for name, value in fields.items() if value is None]:
                del line[name]
            try:
                write_info(self._log, "request", line, level_checked=enabled is not None)
            except Exception:  # noqa: BLE001 - the answer is out or on its way: a lost line
                # must not break it. The standard library's logging reports on stderr what its
                # sink refuses.
                logging.getLogger("proxy").exception("request line not written (status %s)",
                                                     fields["status"])
        metrics = self._metrics
        if metrics is not None:
            metrics.observe_request(self._kind, fields["status"], fields.get("upstream_ms"))
            if fields.get("upstream_error") is not None:
                metrics.observe_stream_error(self._kind)

    def _settle(self, exc: BaseException) -> None:
        """The status and error the client got, from how the handler failed."""
        if isinstance(exc, ProxyError):
            self.fields["status"] = exc.status
            self.fields["error"] = exc.code or exc.type
        elif is_cut(exc):
            self._cut_by_shutdown()
        elif isinstance(exc, (asyncio.CancelledError, ConnectionResetError)):
            if self.fields.get("client_left_after_end"):
                return  # it had the whole answer: the status it got is the upstream's
            self.fields["status"] = CLIENT_CLOSED
            self.fields["error"] = "client_disconnected"
        elif not isinstance(exc, GeneratorExit):
            self.fields["status"] = self.fields["status"] or 500
            self.fields["error"] = type(exc).__name__

    def _cut_by_shutdown(self) -> None:
        # `bytes_out` is set as the answer starts going out: then the client got its status
        # (and part of the body); before, the drain answers 503 in its place.
        if "bytes_out" not in self.fields:
            self.fields["status"] = ShuttingDown.status
        self.fields["error"] = ShuttingDown.code
