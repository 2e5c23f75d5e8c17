"""How the Redis backend runs its Lua scripts, the store's and the history's alike.

A script is called by its digest (`EVALSHA`): one command, never its text. A server that forgot
it (restarted, `SCRIPT FLUSH`) answers NOSCRIPT without running anything, so the script is
loaded and the call sent again, once: a write is never applied twice (the client retries
nothing on its own, `proxy/store/redis_connection.py`). In a pipelined batch, the commands
answered NOSCRIPT are sent again, in their order, once their scripts are loaded.

Not redis-py's `register_script`: in a pipeline it asks `SCRIPT EXISTS` before every batch, a
round trip more for each.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import redis.asyncio
from redis.exceptions import NoScriptError

from proxy.store.redis_writer import Command

_DIGESTS: dict[str, str] = {}  # script text -> its digest
_SCRIPTS: dict[str, str] = {}  # and back: what a NOSCRIPT answer asks to load


def sha(script: str) -> str:
    """The digest `EVALSHA` calls a script by (Redis's own: SHA-1 of its text)."""
    digest = _DIGESTS.get(script)
    if digest is None:
        digest = _DIGESTS[script] = hashlib.sha1(script.encode("utf-8")).hexdigest()
        _SCRIPTS[digest] = script
    return digest


def evalsha_args(script: str, keys: Sequence[str], args: Sequence[Any]) -> Command:
    """The arguments of one `EVALSHA` command."""
    return ("EVALSHA", sha(script), len(keys), *keys, *args)


async def load_scripts(client: redis.asyncio.Redis, scripts: Iterable[str]) -> None:
    for script in scripts:
        await client.script_load(script)


async def run_script(client: redis.asyncio.Redis, script: str, keys: Sequence[str],
                     args: Sequence[Any]) -> Any:
    """A script's answer; loaded again when the server forgot it."""
    try:
        return await client.execute_command(*evalsha_args(script, keys, args))
    except NoScriptError:
        await client.script_load(script)
        return await client.execute_command(*evalsha_args(script, keys, args))


async def run_pipelined(client: redis.asyncio.Redis, commands: Sequence[Command]) -> list[Any]:
    """Each command's answer or error, in order, as one pipeline (a lost connection fails
    them all); the scripts the server forgot are loaded and their calls sent again."""
    results = await _pipelined(client, commands)
    forgotten = [n for n, result in enumerate(results) if isinstance(result, NoScriptError)]
    if forgotten:
        await load_scripts(client, {_SCRIPTS[commands[n][1]] for n in forgotten})
        again = await _pipelined(client, [commands[n] for n in forgotten])
        for n, result in zip(forgotten, again):
            results[n] = result
    return results


async def _pipelined(client: redis.asyncio.Redis, commands: Sequence[Command]) -> list[Any]:
    async with client.pipeline(transaction=False) as pipe:
        for command in commands:
            pipe.execute_command(*command)
        return list(await pipe.execute(raise_on_error=False))
