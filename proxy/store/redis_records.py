"""What the Redis store reads back: its replies decoded into the records of `proxy/records.py`.

Records are stored as the JSON of their `to_data` (`proxy/store/jsoncodec.py`); numbers as
their text. A value that does not decode (damaged, or written by a newer proxy) raises
`StateUnreadable` naming what it is, never the value (it holds client content).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from proxy.errors import ProxyError
from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState
from proxy.store import jsoncodec
from proxy.store.base import StoreError, ThreadSummary

R = TypeVar("R")
# The thread hash's fields a `list_threads` line needs, in `summary`'s order.
SUMMARY_FIELDS = ("thread", "tenant", "created_at", "event_count", "last_estimate")


class StateUnreadable(StoreError, ProxyError):
    """A stored value that does not decode: damaged, or written by a newer proxy."""

    status = 500
    type = "server_error"
    code = "state_damaged"

    def __init__(self, kind: str, error: Exception) -> None:
        super().__init__(f"A stored {kind} in the proxy's Redis state cannot be decoded "
                         f"({type(error).__name__}): it is damaged or was written by a newer "
                         "proxy version.")


def thread_state(key: ThreadKey, reply: Sequence[Any]) -> ThreadState:
    """The state of the `LOAD` script's reply; an empty one (`known` False) for `[]`."""
    if not reply:
        return ThreadState(key)
    flat, anchor_texts, event_text = reply
    fields = dict(zip(flat[::2], flat[1::2]))
    anchors = tuple(decoded(Anchor, "anchor", text) for text in anchor_texts)
    touched = number(float, "thread's last activity", fields.get(b"last_activity"))
    estimate = fields.get(b"last_estimate")
    estimate_at = fields.get(b"estimate_at")  # missing in a hash of an older proxy
    mark = fields.get(b"microcompact")
    return ThreadState(
        key, created_at=number(float, "thread's creation time", fields.get(b"created_at")),
        # As the SQLite store reads it: a touch held back or lost, the newest answer stands in.
        last_activity=max(touched, anchors[0].created_at) if anchors else touched,
        anchors=anchors,
        event=decoded(CompactionEvent, "checkpoint", event_text) if event_text else None,
        event_count=number(int, "thread's checkpoint count", fields.get(b"event_count")),
        microcompact=decoded(MicrocompactMark, "microcompaction mark", mark) if mark else None,
        last_estimate=number(int, "thread's estimate", estimate) if estimate else None,
        estimate_at=number(float, "thread's estimate time", estimate_at) if estimate_at else None)


def summary(values: Sequence[Any], active: float) -> ThreadSummary | None:
    """A `list_threads` line of the thread hash's `SUMMARY_FIELDS` values; None when the
    hash is gone."""
    thread, tenant, created_at, event_count, estimate = values
    if thread is None or tenant is None:
        return None
    return ThreadSummary(
        text(thread, "thread id"), text(tenant, "tenant"),
        number(float, "thread's creation time", created_at), active,
        number(int, "thread's checkpoint count", event_count),
        number(int, "thread's estimate", estimate) if estimate else None)


def decoded(record: type[R], kind: str, data: bytes) -> R:
    try:
        return record.from_data(jsoncodec.loads(data))  # type: ignore[attr-defined, no-any-return]
    except (ValueError, TypeError, AttributeError) as error:  # JSON errors are ValueErrors
        raise StateUnreadable(kind, error) from None


def number(kind_of: type[R], kind: str, data: bytes | None) -> R:
    try:
        return kind_of(data)  # type: ignore[call-arg]
    except (ValueError, TypeError) as error:  # None: a field missing
        raise StateUnreadable(kind, error) from None


def text(data: bytes, kind: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise StateUnreadable(kind, error) from None
