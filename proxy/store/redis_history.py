"""The history offload (SPEC §5) on Redis, for `state.backend: redis`: one list per thread.

Several proxy instances on different hosts share one thread's history, so it cannot be files
under `state.path`. The list is `<prefix>h:<digest>`, the digest of (tenant, normalized thread
id) as the files name theirs: never the id itself. `history_file` names it `redis:<list>`.

Each element is one line of the files' form, `{"seq": n, "at": unix_time, "record": {...}}`,
with `seq` its position (1-based). Positions are LINES here, not bytes: `Appended.start/end`,
`Discarded.size` and so the `history_end` a checkpoint records count elements of the list.

Every change is one Lua script, run as the store runs its own (`proxy/store/redis_eval.py`),
which Redis runs whole or not at all: an offload pushes all its lines or none (a client killed
mid-command sent a command the server never ran), a retract cuts back only when the list still
ends where its append left it, a `discard_tail` trims what lies past the committed end. Redis
errors are raised as `RedisHistoryError`, an `OSError` like the files' own, so the compactor
records a failed offload and goes on (SPEC §5).
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Iterable
from typing import Any, TypeVar

from proxy.records import ThreadKey
from proxy.redaction import redacted_url
from proxy.settings import RedisSettings
from proxy.store import jsoncodec
from proxy.store.base import REDIS_MISSING
from proxy.store.history import Appended, Discarded, HistoryContents, parse_values
from proxy.store.redis_keys import RedisKeys, thread_digest

T = TypeVar("T")
SCHEME = "redis:"
_DIGEST = re.compile(r"[0-9a-f]{64}")

# ARGV: at (JSON), the retention in ms ('0': none), then each record (JSON). The lines are
# built here so that their `seq` follows the length the push itself finds; RPUSH goes in
# chunks, as `unpack` has a limit. The list takes the thread's TTL as its other keys do
# (`proxy/store/redis_scripts.py`): the checkpoint that follows renews it with them, and lines
# whose checkpoint never came expire too.
_OFFLOAD = """
local before = redis.call('LLEN', KEYS[1])
local lines = {}
for i = 3, #ARGV do
  lines[#lines + 1] = '{"seq":' .. (before + i - 2) .. ',"at":' .. ARGV[1]
      .. ',"record":' .. ARGV[i] .. '}'
  if #lines == 1000 then
    redis.call('RPUSH', KEYS[1], unpack(lines))
    lines = {}
  end
end
if #lines > 0 then redis.call('RPUSH', KEYS[1], unpack(lines)) end
if ARGV[2] == '0' then redis.call('PERSIST', KEYS[1])
else redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return before
"""

# ARGV: start, end. Cut back to `start` lines only when the list has exactly `end`.
_RETRACT = """
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[2]) then return 0 end
local start = tonumber(ARGV[1])
if start == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, start - 1) end
return 1
"""

# ARGV: end. Returns {length after, lines cut, bytes cut}.
_DISCARD_TAIL = """
local size = redis.call('LLEN', KEYS[1])
local keep = tonumber(ARGV[1])
if size <= keep then return {size, 0, 0} end
local bytes = 0
for _, line in ipairs(redis.call('LRANGE', KEYS[1], keep, -1)) do bytes = bytes + #line end
if keep == 0 then redis.call('DEL', KEYS[1]) else redis.call('LTRIM', KEYS[1], 0, keep - 1) end
return {keep, size - keep, bytes}
"""

_SCRIPTS = (_OFFLOAD, _RETRACT, _DISCARD_TAIL)


class RedisHistoryError(OSError):
    """The history list could not be read or written (the server unreachable, a timeout, a
    refused command); the message names the server by its redacted URL."""


class RedisHistory:
    unit = "lines"

    def __init__(self, settings: RedisSettings, *, read_only: bool = False,
                 retention_s: float = 0.0) -> None:
        """`read_only`: for the state commands, which only read (no script is loaded: that
        fills the server's script cache, and a read-only replica refuses it); `retention_s`:
        the TTL an offload gives the list (0: none)."""
        self.settings = settings
        self.read_only = read_only
        self._retention_ms = str(int(retention_s * 1000))
        self.shown_url = redacted_url(settings.url)
        self._client: Any = None  # redis.asyncio.Redis once open
        self._keys = RedisKeys(settings.prefix)

    async def open(self) -> None:
        """Connect and PING, so that a wrong URL stops the start, not the first compaction."""
        if self._client is not None:
            return
        try:
            # The store's client: no command is retried on its own (an offload run twice
            # would push its lines twice), and no error text holds the password.
            from proxy.store.redis_connection import connect
            from proxy.store.redis_eval import load_scripts
        except ImportError as exc:
            raise RedisHistoryError(REDIS_MISSING) from exc
        client = connect(self.settings.url, self.settings.timeout_s)
        try:
            await self._guarded("PING", client.ping())
            if not self.read_only:  # a script's first run is then one command
                await self._guarded("SCRIPT LOAD", load_scripts(client, _SCRIPTS))
        except BaseException:
            await client.aclose()
            raise
        self._client = client

    async def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def list_for(self, key: ThreadKey) -> str:
        return self._keys.history(thread_digest(key))

    def path_for(self, key: ThreadKey) -> str:
        """What `history_file` says of the thread's list."""
        return SCHEME + self.list_for(key)

    async def offload_async(self, key: ThreadKey, records: Iterable[dict[str, Any]],
                            at: float | None = None) -> Appended:
        """Push the records as lines, all or none; returns where they went, for `retract`."""
        stamp = jsoncodec.dumps(time.time() if at is None else at)
        values = [jsoncodec.dumps(record) for record in records]
        name = self.list_for(key)
        before = int(await self._run("offload", _OFFLOAD, [name],
                                     [stamp, self._retention_ms, *values]))
        return Appended(SCHEME + name, before, before + len(values), before)

    async def retract_async(self, appended: Appended) -> bool:
        """Take `appended`'s lines back if nothing was pushed after them; returns whether it
        did. The length check and the trim are one script: nothing lands in between."""
        name = self._list_of(appended.path)
        done = await self._run("retract", _RETRACT, [name], [appended.start, appended.end])
        return bool(done)

    async def discard_tail_async(self, key: ThreadKey, end: int) -> Discarded:
        """Trim the thread's list back to `end` lines when it is longer (lines an attempt
        pushed whose checkpoint never committed); a shorter or missing list stays as it is."""
        size, lines, size_bytes = await self._run("discard_tail", _DISCARD_TAIL,
                                                  [self.list_for(key)], [max(end, 0)])
        return Discarded(int(size), int(size_bytes), int(lines))

    async def read_async(self, path: str) -> HistoryContents:
        """Every line of the list; one that is not a JSON object is reported as damaged. One
        LRANGE: the lines as they stood at one moment, never half an offload."""
        name = self._list_of(path)
        return parse_values(await self._guarded("read", self._connected().lrange(name, 0, -1)))

    def _list_of(self, path: str) -> str:
        """The list a `history_file` names; only a history list under our prefix is read."""
        text = str(path)
        head = SCHEME + self._keys.history("")
        if not text.startswith(head) or not _DIGEST.fullmatch(text[len(head):]):
            raise ValueError(f"not a history list under {self.settings.prefix!r}: {text!r}")
        return text[len(SCHEME):]

    async def _run(self, what: str, script: str, keys: list[str], args: list[Any]) -> Any:
        from proxy.store.redis_eval import run_script
        return await self._guarded(what, run_script(self._connected(), script, keys, args))

    def _connected(self) -> Any:
        if self._client is None:
            raise RedisHistoryError(f"the history on {self.shown_url} is not open")
        return self._client

    async def _guarded(self, what: str, call: Awaitable[T]) -> T:
        from proxy.store.redis_connection import SERVER_ERRORS, described
        try:
            return await call
        except SERVER_ERRORS as exc:
            raise RedisHistoryError(f"history {what} failed: "
                                    f"{described(exc, self.settings.url)}") from exc
