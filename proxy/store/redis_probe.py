"""What the state commands ask the Redis server behind `state.backend: redis` before they read:
whether it answers, and what it keeps across a restart.

The CLI never writes: it reads through a store opened `read_only`
(`proxy/store/redis_store.py`), which sends no write command, so it needs no look first at
whether a proxy has written under the prefix (an empty prefix reads as no threads).

Checkpoints are worth a summarizer's tokens each, so a server that keeps them only in memory
(or in snapshots taken every few minutes) loses work when it restarts: that earns a warning.
`CONFIG GET` may be refused (managed services, ACLs): `INFO persistence` is asked then, and
when both are refused the warning says the persistence could not be read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.settings import RedisSettings
from proxy.store.base import REDIS_MISSING, StoreError


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
        if self.save is None:  # INFO says whether AOF is on, not when snapshots are taken
            return ("the Redis server runs with appendonly no: checkpoints written since its "
                    "last snapshot, if it takes any, are lost when it restarts; appendonly yes "
                    "keeps each one")
        return (f"the Redis server keeps snapshots only (save {self.save}): checkpoints "
                "written since the last one are lost when it restarts; appendonly yes keeps "
                "each one")

    def describe(self) -> str:
        aof = {True: "yes", False: "no", None: "unknown"}[self.appendonly]
        save = "unknown" if self.save is None else (self.save or "none")
        return f"appendonly {aof}, save {save}"


@dataclass(frozen=True)
class Probe:
    persistence: Persistence


async def probe(settings: RedisSettings) -> Probe:
    """PING, then ask; an unreachable server is a StoreError naming its redacted URL."""
    try:
        from proxy.store.redis_connection import SERVER_ERRORS, connect, unreachable
    except ImportError:
        raise StoreError(REDIS_MISSING) from None
    client = connect(settings.url, settings.timeout_s)
    try:
        await client.ping()
        return Probe(await _persistence(client))
    except SERVER_ERRORS as error:
        raise unreachable(error, settings.url) from None
    finally:
        await client.aclose()


async def _persistence(client: Any) -> Persistence:
    from redis.exceptions import ResponseError
    for read in (_from_config, _from_info):  # CONFIG may be refused (ACLs, managed services)
        try:
            return await read(client)
        except ResponseError:
            continue
    return Persistence(None, None)


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
