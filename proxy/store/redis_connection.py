"""The Redis store's client and its errors: the one place redis-py's errors become ours.

The client never retries a command on its own: a write whose answer was lost may have run,
and run again it would add a checkpoint or an anchor twice. A connection the server closed
(a Redis restart) is found and replaced by the pool before it is used, so a restarted
server is served again from the next command on.

An error's text never holds the server's password: the URL is shown through
`proxy.redaction.redacted_url`, and the password itself is struck from redis-py's texts.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote, urlsplit

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from proxy.errors import ProxyError
from proxy.redaction import redacted_url
from proxy.store.base import StoreError

# What redis-py's own calls raise besides its RedisError (a socket that failed to close).
SERVER_ERRORS: tuple[type[BaseException], ...] = (redis.RedisError, OSError)


class StateUnavailable(StoreError, ProxyError):
    """Redis did not serve a read or an awaited write: the request fails, the proxy serves
    on. Its text (`str`, the log's) says why; its answer to a client names no server."""

    status = 503
    type = "server_error"
    code = "state_unavailable"
    keeps_history_lines = True  # a write whose answer was lost may have run

    def __init__(self, detail: str) -> None:
        super().__init__("The proxy's state store cannot be reached, so the request cannot be "
                         "served. See the proxy's log (state_unavailable).")
        self.detail = detail

    def __str__(self) -> str:
        return self.detail


def connect(url: str, timeout_s: float) -> redis.asyncio.Redis:
    """A client (its pool connects on first use); `timeout_s` bounds each connect and command."""
    return redis.asyncio.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 0), decode_responses=False)


def described(error: BaseException, url: str) -> str:
    """"Redis at <url, masked>: <error type>: <its text, without the password>"."""
    text = str(error)
    for secret in _secrets(url):
        text = text.replace(secret, "***")
    return f"Redis at {redacted_url(url)}: {type(error).__name__}: {text}"


def unreachable(error: BaseException, url: str) -> StoreError:
    """What `open` raises when the server does not answer its first PING."""
    return StoreError(f"cannot reach {described(error, url)}")


def _secrets(url: str) -> list[str]:
    """The password as the URL holds it and as redis-py reads it (a `unix://` URL gives it as
    a query value)."""
    try:
        parts = urlsplit(url)
        passwords = [parts.password or "", *parse_qs(parts.query).get("password", [])]
    except ValueError:  # a port that is no number: redis-py refused it first
        return []
    found = {form for password in passwords if password
             for form in (password, unquote(password))}
    return sorted(found, key=len, reverse=True)  # a longer form first: no half-struck text
