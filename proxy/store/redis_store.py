"""The Redis state store: `StateStore` on a Redis server that several proxy instances share.

The guarantees are the SQLite store's (`proxy/store/base.py`); the key layout is in
`proxy/store/redis_keys.py`, the scripts that write a thread atomically in
`proxy/store/redis_scripts.py`. Queued writes (`record_request`, `add_anchor`, `add_origin`)
go out at once, one pipeline per batch (`proxy/store/redis_writer.py`); a `load`, `written`
and an awaited write (`record_requests`, `add_event`, `set_microcompact`) wait for those of
their threads queued before them (so a thread's writes land in the order they were made), an
`origin` and `origin_written` for its id's, and listings, `flush` and `close` for all of
them. Another instance's writes are seen by the next read: `shared` is True, so the cache in
front (`proxy/store/cached.py`) keeps nothing across requests, and a thread is compacted by one
instance at a time (`compaction_lease`, `proxy/store/redis_lease.py`).

Queued writes that fail are logged as `state_write_failed` (rate-limited,
`proxy/store/failures.py`); reads and awaited writes that fail raise `StateUnavailable`,
logged as `state_unavailable` (rate-limited too). Every lost write is told, unthrottled, to
the `FailureHooks`. Origins expire `origins_kept_s` after they were made (a key's TTL).

Opened `read_only` (the state commands of the CLI), the store sends no write at all, so it
reads a read-only replica too: `open` writes no layout version (a missing one reads as this
layout: a Redis restart without persistence, an eviction) and loads no script, as loading one
fills the server's script cache; `load` reads in a MULTI/EXEC instead of the `LOAD` script; the
writing methods raise StoreError.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

import redis.asyncio
import structlog

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey, ThreadState
from proxy.redaction import redacted_url
from proxy.store import jsoncodec
# `LeaseLost` is the base's: the compactor, which imports no Redis, tells it from other refusals.
from proxy.store.base import ANCHORS_KEPT, LeaseLoss, LeaseLost, StoreError, ThreadSummary, Touch
from proxy.store.failures import NO_HOOKS, FailureHooks, WriteFailures
from proxy.store.keys import storable_key, thread_key_text
from proxy.store.redis_connection import (SERVER_ERRORS, StateUnavailable, connect, described,
                                          unreachable)
from proxy.store.redis_keys import LAYOUT_VERSION, RedisKeys, thread_digest
from proxy.store.redis_lease import held_lease
from proxy.store.redis_retention import expiry_pass
from proxy.store.redis_records import SUMMARY_FIELDS, decoded, summary, thread_state
from proxy.store.redis_eval import evalsha_args, load_scripts, run_pipelined, run_script
from proxy.store.redis_scripts import ADD_ANCHOR, ADD_EVENT, ALL, LOAD, SET_MICROCOMPACT, TOUCH
from proxy.store.redis_writer import Command, QueuedWrites
from proxy.store.sqlite_db import ORIGINS_KEPT_S

UNAVAILABLE_REPORT_INTERVAL_S = 10.0


class RedisStore:
    shared = True  # other instances write the same state

    def __init__(self, url: str, *, prefix: str = "compaction-proxy:", timeout_s: float = 5.0,
                 lease_s: float = 30.0, anchors_kept: int = ANCHORS_KEPT,
                 origins_kept_s: float = ORIGINS_KEPT_S, log: Any = None,
                 hooks: FailureHooks = NO_HOOKS, read_only: bool = False,
                 retention_s: float = 0.0) -> None:
        """`retention_s`: each write gives the thread's keys this TTL (0: none, and takes off
        any they had; `proxy/store/redis_scripts.py`)."""
        self.url = url
        self.read_only = read_only
        self.keys = RedisKeys(prefix)
        self._timeout_s = timeout_s
        self._lease_s = lease_s
        # thread digest -> the token this store holds, and the checkpoints there were then
        self._lease_tokens: dict[str, tuple[str, int]] = {}
        self._anchors_kept = anchors_kept
        self._origins_kept_ms = int(origins_kept_s * 1000)
        self._retention_ms = str(int(retention_s * 1000))  # as the scripts compare it: '0'
        self._untimed: asyncio.Task[None] | None = None  # `proxy/store/redis_retention.py`
        self._client: redis.asyncio.Redis | None = None
        self._closing = False
        self.writer = QueuedWrites(self._send_batch, self._write_failed)
        self._log = log if log is not None else structlog.get_logger("proxy")
        self._hooks = hooks
        self._failures = WriteFailures()
        self._unavailable = WriteFailures(UNAVAILABLE_REPORT_INTERVAL_S)

    async def open(self) -> None:
        if self._client is not None:
            return
        client = connect(self.url, self._timeout_s)
        try:
            await client.ping()
            await self._check_layout(client)
            if not self.read_only:
                await load_scripts(client, ALL)
        except SERVER_ERRORS as error:
            await client.aclose()
            raise unreachable(error, self.url) from None
        except BaseException:
            await client.aclose()
            raise
        self._client, self._closing = client, False
        if not self.read_only and self._retention_ms != "0":
            self._untimed = asyncio.get_running_loop().create_task(expiry_pass(
                client, self.keys, self._retention_ms, self._log, redacted_url(self.url)),
                name="state-expiry-pass")

    async def close(self) -> None:
        client = self._client
        if client is None or self._closing:
            return
        self._closing = True  # from here on, new calls fail instead of racing the close
        untimed, self._untimed = self._untimed, None
        if untimed is not None:
            untimed.cancel()
            await asyncio.wait([untimed])
        try:
            await self.writer.settled()
            self._report(self._failures.take())
        finally:
            self._client = None
            await client.aclose()

    async def flush(self) -> None:
        self._require_client()
        await self.writer.settled()

    async def written(self, key: ThreadKey) -> None:
        self._require_client()
        await self.writer.settled_for(self.keys.thread(thread_digest(key)))

    async def origin_written(self, made_id: str) -> None:
        self._require_client()
        await self.writer.settled_for(self.keys.origin(made_id))

    async def load(self, key: ThreadKey) -> ThreadState:
        self._require_client()
        digest = thread_digest(key)
        thread = self.keys.thread(digest)
        await self.writer.settled_for(thread)  # this thread's queued writes: see them
        keys = (thread, self.keys.anchors(digest), self.keys.events(digest))
        if self.read_only:
            return thread_state(key, await self._read_thread(*keys))
        return thread_state(key, await self._awaited(LOAD, keys, (self._anchors_kept,)))

    def record_request(self, key: ThreadKey, at: float, estimate: int | None) -> None:
        self._require_writable()
        keys, args = self._touch(key, at, estimate)
        self.writer.put(evalsha_args(TOUCH, keys, (*args, self._retention_ms)), keys[0])

    async def record_requests(self, touches: Sequence[Touch]) -> None:
        self._require_writable()
        if not touches:
            return
        keys: list[str] = []
        args: list[Any] = []
        hashes: list[str] = []
        for key, at, estimate in touches:
            more_keys, more_args = self._touch(key, at, estimate)
            keys += more_keys
            args += more_args
            hashes.append(more_keys[0])
        await self.writer.settled_for(*hashes)  # in order after these threads' queued writes
        try:
            await self._awaited(TOUCH, keys, [*args, self._retention_ms])  # all or none
        except StateUnavailable as error:
            self._lost(len(touches), error)  # reported as the queued writes' are
            raise

    def add_anchor(self, key: ThreadKey, anchor: Anchor) -> None:
        self._require_writable()
        _, keys, args = self._thread_args(key, anchor.created_at)
        self.writer.put(evalsha_args(
            ADD_ANCHOR, keys, (*args, anchor.created_at, jsoncodec.dumps(anchor.to_data()),
                               self._anchors_kept, self._retention_ms)),
            keys[0])

    async def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        self._require_writable()
        expires_ms = int(at * 1000) + self._origins_kept_ms
        name = self.keys.origin(made_id)
        self.writer.put(("SET", name, upstream, "PXAT", expires_ms), name)

    async def origin(self, made_id: str) -> str | None:
        client = self._require_client()
        name = self.keys.origin(made_id)
        await self.writer.settled_for(name)
        try:
            found = await client.get(name)
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        return found.decode("utf-8", "replace") if found is not None else None

    async def add_event(self, key: ThreadKey, event: CompactionEvent) -> CompactionEvent:
        self._require_writable()
        digest, keys, args = self._thread_args(key, event.created_at)
        data = event.to_data()
        del data["seq"]  # the script puts it first, counted on the server
        token, seen = self._lease_tokens.get(digest, ("", 0))
        seq = await self._awaited_write(
            ADD_EVENT, (*keys, self.keys.lease(digest)),
            (*args, jsoncodec.dumps(data), token, seen, self._retention_ms))
        if int(seq) < 0:
            raise LeaseLost()
        if token and self._lease_tokens.get(digest, ("", 0))[0] == token:
            # the holder's own checkpoint: its next one builds on it
            self._lease_tokens[digest] = (token, int(seq))
        return replace(event, seq=int(seq))

    async def lease_check(self, key: ThreadKey) -> None:
        """`LeaseLost` when the lease is another's now, or a checkpoint was written since it
        was taken: the conditions `ADD_EVENT` refuses a checkpoint on, asked before the
        history is cut and appended to (a stalled holder's lines would land among the new
        holder's, under its committed checkpoint)."""
        digest = thread_digest(key)
        held = self._lease_tokens.get(digest)
        if held is None:
            return  # not compacting under a lease here (a store used without one)
        client = self._require_writable()
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.get(self.keys.lease(digest))
                pipe.llen(self.keys.events(digest))
                holder, written = await pipe.execute()
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        token, seen = held
        # As `ADD_EVENT` judges: a lease that ran out with no one taking it protects nothing.
        if (holder is not None and holder.decode() != token) or int(written) != seen:
            raise LeaseLost()

    async def set_microcompact(self, key: ThreadKey, mark: MicrocompactMark) -> None:
        self._require_writable()
        _, keys, args = self._thread_args(key, mark.created_at)
        await self._awaited_write(SET_MICROCOMPACT, keys,
                                  (*args, jsoncodec.dumps(mark.to_data()), self._retention_ms))

    async def list_threads(self, limit: int = 100) -> list[ThreadSummary]:
        client = self._require_client()
        await self.writer.settled()
        if limit == 0:
            return []
        try:
            ranked = await client.zrevrange(self.keys.threads, 0, limit - 1 if limit > 0 else -1,
                                            withscores=True)
            async with client.pipeline(transaction=False) as pipe:
                for digest, _ in ranked:
                    pipe.hmget(self.keys.thread(digest.decode("ascii")), SUMMARY_FIELDS)
                rows = await pipe.execute()
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        lines = (summary(values, active) for values, (_, active) in zip(rows, ranked))
        return [line for line in lines if line is not None]

    async def find(self, thread_id: str) -> list[ThreadState]:
        client = self._require_client()
        await self.writer.settled()
        thread = thread_key_text(thread_id)
        try:
            tenants = await client.smembers(self.keys.tenants_of(thread))
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        names = sorted(tenant.decode("utf-8", "replace") for tenant in tenants)
        states = [await self.load(ThreadKey(tenant, thread)) for tenant in names]
        return [state for state in states if state.known]  # a tenant's thread may have expired

    async def events(self, key: ThreadKey) -> list[CompactionEvent]:
        client = self._require_client()
        await self.writer.settled()
        try:
            texts = await client.lrange(self.keys.events(thread_digest(key)), 0, -1)
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        return [decoded(CompactionEvent, "checkpoint", text) for text in texts]

    @asynccontextmanager
    async def compaction_lease(self, key: ThreadKey) -> AsyncIterator[LeaseLoss]:
        """Held by one instance at a time per thread (see `proxy/store/redis_lease.py`); yields
        a future done once another holder took it. A checkpoint written under it is refused
        once another holder has it or has written one since (`LeaseLost`)."""
        client = self._require_writable()
        digest = thread_digest(key)
        who = {"thread": thread_key_text(key.thread), "tenant": key.tenant}
        async with held_lease(client, self.keys.lease(digest), self._lease_s, self._script,
                              self._log, self._unavailable_error, who) as held:
            try:  # read under the lease: only its holder adds a checkpoint until it lets go
                seen = await client.llen(self.keys.events(digest))
            except SERVER_ERRORS as error:
                raise self._unavailable_error(error) from None
            self._lease_tokens[digest] = (held.token, int(seen))
            try:
                yield held.lost
            finally:
                del self._lease_tokens[digest]

    # -- commands -----------------------------------------------------------------------

    def _thread_args(self, key: ThreadKey,
                     at: float) -> tuple[str, tuple[str, ...], tuple[Any, ...]]:
        """A thread-writing script's digest, first keys and first arguments; `at`: the time
        of a thread this write creates (now, for a record without one)."""
        stored = storable_key(key)
        digest = thread_digest(stored)
        return digest, self._thread_keys(stored, digest), (
            digest, stored.tenant, stored.thread, float(at or time.time()))

    def _touch(self, key: ThreadKey, at: float,
               estimate: int | None) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        stored = storable_key(key)
        digest = thread_digest(stored)
        shown_estimate = "" if estimate is None else int(estimate)
        return self._thread_keys(stored, digest), (digest, stored.tenant, stored.thread,
                                                   float(at), shown_estimate)

    def _thread_keys(self, stored: ThreadKey, digest: str) -> tuple[str, ...]:
        """KEYS[1..6] of every thread-writing script (`proxy/store/redis_scripts.py`)."""
        keys = self.keys
        return (keys.thread(digest), keys.threads, keys.tenants_of(stored.thread),
                keys.anchors(digest), keys.events(digest), keys.history(digest))

    async def _read_thread(self, thread: str, anchors: str, events: str) -> list[Any]:
        """What the `LOAD` script answers, read without a script: the three keys at one moment
        (MULTI/EXEC), which a read-only replica serves."""
        client = self._require_client()
        try:
            async with client.pipeline(transaction=True) as pipe:
                pipe.hgetall(thread)
                pipe.lrange(anchors, 0, self._anchors_kept - 1)
                pipe.lindex(events, -1)
                fields, anchor_texts, event_text = await pipe.execute()
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None
        if not fields:
            return []
        return [[part for pair in fields.items() for part in pair], anchor_texts, event_text]

    async def _script(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        return await run_script(self._require_client(), script, keys, args)

    async def _awaited(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        try:
            return await self._script(script, keys, args)
        except SERVER_ERRORS as error:
            raise self._unavailable_error(error) from None

    async def _awaited_write(self, script: str, keys: Sequence[str],
                             args: Sequence[Any]) -> Any:
        """A write of the thread whose hash is `keys[0]`, whose caller waits for it and logs its
        failure itself: counted here."""
        await self.writer.settled_for(keys[0])  # in order after the thread's queued writes
        try:
            return await self._awaited(script, keys, args)
        except StateUnavailable:
            self._hooks.writes_lost(1)
            raise

    async def _send_batch(self, batch: Sequence[Command]) -> tuple[int, BaseException | None]:
        client = self._client
        if client is None:
            return len(batch), StoreError("state store is not open")
        results = await run_pipelined(client, batch)
        errors = [result for result in results if isinstance(result, Exception)]
        return len(errors), errors[-1] if errors else None

    # -- failures -----------------------------------------------------------------------

    def _write_failed(self, count: int, error: BaseException) -> None:
        self._lost(count, error)

    def _lost(self, count: int, error: BaseException) -> None:
        self._hooks.writes_lost(count)
        self._report(self._failures.record(count, _as_exception(error), time.monotonic()))

    def _report(self, fields: dict[str, Any] | None) -> None:
        if fields is None:
            return
        try:
            self._log.warning("state_write_failed", **fields, failed_total=self.writer.failed,
                              redis=redacted_url(self.url))
        except Exception:  # noqa: BLE001 - a line that cannot be written must not fail the
            pass           # read or close that found the failure

    def _unavailable_error(self, error: BaseException) -> StateUnavailable:
        unavailable = StateUnavailable(described(error, self.url))
        fields = self._unavailable.record(1, _as_exception(error), time.monotonic())
        if fields is not None:
            try:
                self._log.warning("state_unavailable", **fields, detail=unavailable.detail)
            except Exception:  # noqa: BLE001 - as in `_report`
                pass
        return unavailable

    async def _check_layout(self, client: redis.asyncio.Redis) -> None:
        """Refuses a newer layout. A missing version (lost in a restart without persistence,
        evicted) is this layout's: a serving store writes it back as it opens."""
        if not self.read_only:
            await client.set(self.keys.version, LAYOUT_VERSION, nx=True)
        found = await client.get(self.keys.version)
        if found is not None and (not found.isdigit() or int(found) > LAYOUT_VERSION):
            raise StoreError(
                f"the state under prefix {self.keys.prefix!r} at {redacted_url(self.url)} was "
                f"written by a newer proxy (layout {found!r}; this one knows "
                f"{LAYOUT_VERSION}); use a proxy that knows it")

    def _require_client(self) -> redis.asyncio.Redis:
        if self._client is None or self._closing:
            raise StoreError("state store is not open")
        return self._client

    def _require_writable(self) -> redis.asyncio.Redis:
        if self.read_only:
            raise StoreError("the state store was opened read-only")
        return self._require_client()


def _as_exception(error: BaseException) -> Exception:
    return error if isinstance(error, Exception) else RuntimeError(type(error).__name__)
