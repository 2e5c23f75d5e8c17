"""Whether the Redis server behind `state.backend: redis` answers, and what it keeps across a
restart of its own, for `compaction-proxy check-state`.

Checkpoints are worth a summarizer's tokens each, so a server that keeps them only in memory
(or in snapshots taken every few minutes) loses work when it restarts: that earns a warning.
`CONFIG GET` may be refused (managed services, ACLs): `INFO persistence` is asked then, and
when both are refused the warning says the persistence could not be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.redaction import redacted_url
from proxy.settings import RedisSettings
from proxy.store.base import StoreError

INSTALL = "pip install 'compaction-proxy[redis]'"


@dataclass(frozen=True)
class Persistence:
    appendonly: bool | None  # None: the server would not say
    save: str | None  # the RDB snapshot schedule ("" none); None: the server would not say

    def warning(self) -> str | None:
        """Why checkpoints might not survive a restart of the server; None when they do."""
        if self.appendonly:
            return None
        if self.appendonly is None:
            return ("the Redis server's persistence could not be read (CONFIG GET and INFO "
                    "refused): without appendonly yes, checkpoints may not survive its restart")
        if self.save == "":
            return ("the Redis server keeps nothing on disk (appendonly no, no save schedule): "
                    "every checkpoint and history line is lost when it restarts; set "
                    "appendonly yes")
        schedule = f" (save {self.save})" if self.save else ""
        return (f"the Redis server keeps snapshots only{schedule}: checkpoints written since "
                "the last one are lost when it restarts; appendonly yes keeps each one")

    def describe(self) -> str:
        aof = {True: "yes", False: "no", None: "unknown"}[self.appendonly]
        save = "unknown" if self.save is None else (self.save or "none")
        return f"appendonly {aof}, save {save}"


def connect(settings: RedisSettings) -> Any:
    """A client for `settings` (not yet connected); a missing package is a StoreError."""
    try:
        import redis.asyncio as aioredis
    except ImportError:
        raise StoreError(f"state.backend redis needs the redis package: {INSTALL}") from None
    return aioredis.Redis.from_url(settings.url, socket_timeout=settings.timeout_s,
                                   socket_connect_timeout=settings.timeout_s)


async def server_persistence(settings: RedisSettings) -> Persistence:
    """PING the server, then read its persistence; an unreachable server is a StoreError that
    names it by its redacted URL."""
    from redis.exceptions import RedisError, ResponseError
    client = connect(settings)
    try:
        await client.ping()
        try:
            return await _from_config(client)
        except ResponseError:
            pass
        try:
            return await _from_info(client)
        except ResponseError:
            return Persistence(None, None)
    except RedisError as exc:
        raise StoreError(f"cannot reach the Redis server at {redacted_url(settings.url)}: "
                         f"{type(exc).__name__}: {exc}") from exc
    finally:
        await client.aclose()


async def _from_config(client: Any) -> Persistence:
    config = await client.config_get("appendonly")
    save = await client.config_get("save")
    aof = config.get("appendonly", config.get(b"appendonly"))
    schedule = save.get("save", save.get(b"save"))
    return Persistence(_text(aof) == "yes" if aof is not None else None,
                       None if schedule is None else _text(schedule))


async def _from_info(client: Any) -> Persistence:
    info = await client.info("persistence")
    aof = info.get("aof_enabled")
    return Persistence(None if aof is None else bool(int(aof)), None)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
