"""A config reload (`SIGHUP`): the file read anew, and what changed put in force for the requests
that start afterwards.

The file is read and checked, as `check-config` checks it, off the event loop; an invalid one
changes nothing (`config_reload_failed`, with check-config's own words). A valid one becomes a
new `Configured` (settings, pipeline, routes, origins), built off the loop as well (a new
profile's tokenizer takes some 100 ms to load: requests and streams under way go on), which
replaces the one in force in one assignment on the loop: a request holds the `Configured` it
started with to its end, its stream and its compaction included, so none sees a mix of two
files. What the proxy keeps across requests (the state store, the per-thread compaction locks,
the breakers' states, the caches) is shared by every version: built off the loop, a new version
only reads it, and what it adds (a new tokenizer's counter) joins it on the loop. Keys bound
into what was built at start keep their running values until a restart, and are named
(`config_reload_partial`; `proxy.settings_diff.RESTART_ONLY`).

One reload runs at a time: a signal that comes during one asks for one more after it (the file
may have changed again since it was read); one during the shutdown is ignored. The shutdown
does not wait for a reload under way: its build may never end (a read from a hung mount), and
what it makes is dropped. Its own lines are written whether a changed `logging.level` is
raised or lowered.
"""

from __future__ import annotations

import asyncio
import contextvars
import copy
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from proxy.server.compaction_flow import CompactionFlow
from proxy.server.compactor import Compactor
from proxy.server.estimators import Estimators
from proxy.server.logs import set_level
from proxy.server.origins import origins_for
from proxy.server.pipeline import Pipeline
from proxy.server.retry_lessons import RetryLessons
from proxy.server.services import Configured, Services
from proxy.settings import ConfigError, Settings
from proxy.settings_diff import ReloadPlan, digest, plan_reload


@dataclass(frozen=True)
class Built:
    """What a reload makes off the loop, for `Reloader.apply` to put in force on it."""

    loaded: Settings  # the file as read
    plan: ReloadPlan
    digest: str  # of the settings applied
    running: Configured  # what it was built from
    configured: Configured | None  # None when no setting changed
    tokenizers: dict[str, str] | None  # when `models` or `tokens` changed: for the log


T = TypeVar("T")


def _rank(level: str) -> int:
    return getattr(logging, level.upper())


class Reloader:
    def __init__(self, services: Services, load: Callable[[], Settings], path: str) -> None:
        """`load`: the file read and checked as the proxy started with it (its path, the
        environment now, the command line's overrides); raises ConfigError."""
        self._services = services
        self._load = load
        self._path = path
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._closed = False

    def requested(self) -> None:
        """The signal's handler, on the loop: a reload starts, or follows the one under way."""
        if self._closed:
            self._ignored()
        elif self._task is not None:
            self._again = True
        else:
            self._task = asyncio.get_running_loop().create_task(self._reloading())

    async def close(self) -> None:
        """At the shutdown's start: no reload starts any more, and one under way is not applied.
        It is not waited for either: its build may be stuck for ever in a read."""
        self._closed = True
        if self._task is not None:
            self._ignored()

    async def _reloading(self) -> None:
        try:
            while not self._closed:
                self._again = False
                await self.reload()
                if not self._again:
                    break
        finally:
            self._task = None

    async def reload(self) -> ReloadPlan | None:
        """Read the file and apply it; None when it was invalid (or the proxy is stopping)."""
        try:
            # Built off the loop (the requests and streams under way go on meanwhile), put
            # in force on it.
            built = await off_loop(self.build, self._services.configured)
            if self._closed:  # the shutdown began while it was built (and `close` said so)
                return None
            return self.apply(built)
        except ConfigError as error:
            self._failed(problems=list(error.problems))
        except Exception:  # noqa: BLE001 - a reload never stops a serving proxy
            self._failed(exc_info=True)
        return None

    def build(self, running: Configured) -> Built:
        """Off the loop: the file read and checked, and what it makes of `running`. Only new
        objects are written to here; what the requests under way use is only read."""
        loaded = self._load()
        plan = plan_reload(running.settings, loaded)
        configured = tokenizers = None
        if plan.changed:
            configured = reconfigured(running, plan.applied)
            if {"models", "tokens"} & set(plan.sections):
                # As at start: each profile's tokenizer, loaded now rather than by a request
                # (and one that cannot be loaded fails the reload before anything changed).
                tokenizers = configured.pipeline.estimators.load()
        return Built(loaded, plan, digest(plan.applied), running, configured, tokenizers)

    def apply(self, built: Built) -> ReloadPlan:
        """On the loop: `built` put in force, in one assignment, and said."""
        services, plan = self._services, built.plan
        before = built.running.settings.logging.level
        after = plan.applied.logging.level
        if built.configured is not None:
            built.configured.pipeline.estimators.adopt()
            services.configured = built.configured
            services.metrics.config_loaded(built.digest, plan.applied.upstreams)
        # The reload's own lines are written under the more talkative of the two levels: a
        # raised level applies after them, a lowered one before.
        if _rank(after) < _rank(before):
            set_level(after)
        self._said(built)
        if _rank(after) > _rank(before):
            set_level(after)
        return plan

    def _said(self, built: Built) -> None:
        log, plan = self._services.log, built.plan
        outcome = "applied" if plan.changed else "unchanged"
        facts: dict[str, Any] = {"config": self._path, "changed": list(plan.sections),
                                 "keys": list(plan.changed), "config_digest": built.digest}
        if not plan.changed and not plan.restart_needed:
            facts["note"] = "no setting changed: nothing to apply"
        if built.loaded.warnings:
            facts["warnings"] = list(built.loaded.warnings)
        log.info("config_reloaded", **facts)
        if plan.restart_needed:
            outcome = "partial"
            log.warning("config_reload_partial", config=self._path,
                        restart_needed=list(plan.restart_needed),
                        note="these keys keep their running values until a restart")
        if built.tokenizers is not None:
            log.info("tokenizers", **built.tokenizers)
        self._services.metrics.config_reloads.labels(outcome).inc()

    def _ignored(self) -> None:
        self._services.log.info("config_reload_ignored", config=self._path,
                                reason="the proxy is shutting down")

    def _failed(self, **facts: Any) -> None:
        self._services.log.error("config_reload_failed", config=self._path,
                                 note="the running config stays in force", **facts)
        self._services.metrics.config_reloads.labels("failed").inc()


async def off_loop(call: Callable[[Configured], T], running: Configured) -> T:
    """`call(running)` in a daemon thread of its own, awaited. Not `asyncio.to_thread`: the
    event loop's executor is joined when the proxy stops, so a build stuck in a read would
    keep a stopped proxy alive for ever; nothing waits for a daemon thread."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()
    context = contextvars.copy_context()

    def run() -> None:
        try:
            outcome: tuple[T | None, BaseException | None] = (context.run(call, running), None)
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting task
            outcome = (None, error)
        try:
            loop.call_soon_threadsafe(_settle, future, *outcome)
        except RuntimeError:  # the loop has closed: the proxy stopped, nobody waits for it
            pass

    threading.Thread(target=run, name="config-reload", daemon=True).start()
    return await future


def _settle(future: asyncio.Future[T], result: T | None, error: BaseException | None) -> None:
    if future.done():  # the awaiting task was cancelled (the loop's end)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)  # type: ignore[arg-type]


def reconfigured(running: Configured, settings: Settings) -> Configured:
    """What `settings` make, sharing with `running` what outlives a version of the config."""
    pipeline = _pipeline(running.pipeline, settings)
    origins = origins_for(settings, pipeline.store, pipeline.clock, pipeline.log)
    remembered = running.remembered
    if origins is not None and remembered is not None:
        origins = remembered.reconfigured(settings.upstreams)  # the ids it remembers
    # Routes to one upstream need no memory, but a later reload may route to several again.
    return Configured(settings, pipeline, origins,
                      idle_origins=remembered if origins is None else None)


def _pipeline(running: Pipeline, settings: Settings) -> Pipeline:
    """A pipeline for `settings`: the settings, estimators (thresholds), compactor and flow
    are new; the store, history, identities and the recent requests are shared."""
    pipeline = copy.copy(running)
    pipeline.settings = settings
    pipeline.estimators = Estimators(settings, shared=running.estimators)
    pipeline.compactor = _compactor(running.compactor, settings)
    pipeline.flow = CompactionFlow(settings, pipeline.store, pipeline.compactor, pipeline.log)
    if (settings.routes, settings.upstreams) != (running.settings.routes,
                                                 running.settings.upstreams):
        # Each was learnt of an upstream's refusals: another upstream may not need it.
        pipeline.lessons = RetryLessons()
    return pipeline


def _compactor(running: Compactor, settings: Settings) -> Compactor:
    """The per-thread locks, the breakers' states and the detached compactions are shared: a
    thread's compaction under the old config and a request under the new one take turns."""
    compactor = copy.copy(running)
    compactor.settings = settings
    compactor.breakers = running.breakers.reconfigured(settings.compaction.breaker)
    return compactor
