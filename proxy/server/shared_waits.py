"""An answer's own writes, in a store shared by several instances before its end goes out.

On Redis a client's next turn may reach another instance as soon as it has the answer's end
(an agent answers at once), and that instance has only the store to ask: for the answer's
anchor, the base of the turn's estimate (else estimated conservatively, as a first turn is),
and for its origin (`proxy/server/origins.py`: else routed by its model). Both writes are
queued and go out at once; the answer waits for its own (`StateStore.written`,
`origin_written`), never for other threads' writes, and `SHARED_WAIT_S` at most. A store that
is not shared (SQLite, one process) is read by the next turn in the same process: no wait.
"""

from __future__ import annotations

import asyncio
from typing import Any

from proxy.server.prepared import Prepared
from proxy.server.request_line import RequestLine
from proxy.store import StateStore

# The longest an answer waits for its writes, all of them together: a store that does not
# answer (Redis down) costs the answer no more; the writes fail on their own
# (`state_write_failed`).
SHARED_WAIT_S = 1.0


def within(prepared: Prepared | None) -> asyncio.Timeout:
    """The deadline of an answer's waits: `SHARED_WAIT_S` from the first of them, shared by the
    rest (its origin's, then its anchor's), so a store that does not answer holds the answer
    one second, not one a write."""
    if prepared is None:
        return asyncio.timeout(SHARED_WAIT_S)
    if prepared.waits_end is None:
        prepared.waits_end = asyncio.get_running_loop().time() + SHARED_WAIT_S
    return asyncio.timeout_at(prepared.waits_end)


async def anchor_written(store: StateStore, log: Any, prepared: Prepared,
                         line: RequestLine) -> None:
    """Called on a shared store once the answer's usage was recorded: wait until the thread's
    queued writes, its anchor among them, are in the store. One that does not come in time
    costs the next estimate its anchor, as a failed recording does (`usage_not_recorded`); the
    answer stands."""
    if prepared.key is None:
        return
    try:
        async with within(prepared):
            await store.written(prepared.key)
    except Exception as error:  # noqa: BLE001 - whatever the store raised: the answer stands
        usage_not_recorded(log, line, error)


def usage_not_recorded(log: Any, line: RequestLine, error: Exception) -> None:
    """The answer stands, without its anchor: said on the request line and as its own event."""
    log.warning("usage_not_recorded", thread=line.fields.get("thread"),
                tenant=line.fields.get("tenant"), error=type(error).__name__)
    line.set(usage_not_recorded=type(error).__name__)
