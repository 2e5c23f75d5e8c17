"""The one shared upstream HTTP client, and the mapping of its failures to the proxy's errors.

One long-lived `ClientSession` with a bounded connection pool serves every upstream. It never
decompresses (a byte relay passes `Content-Encoding` through) and keeps no cookies. Low-level
failures become `UpstreamUnavailable` (502) or `UpstreamTimeout` (504) here and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from functools import lru_cache

import aiohttp

from proxy.errors import UpstreamTimeout, UpstreamUnavailable
from proxy.settings import UpstreamSettings


class UpstreamClient:
    def __init__(self, pool_size: int) -> None:
        self._pool_size = pool_size
        self._session: aiohttp.ClientSession | None = None

    async def start(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._pool_size, limit_per_host=self._pool_size,
                                         ttl_dns_cache=300, enable_cleanup_closed=True)
        # No cookie jar: a session shared by every client would replay one client's upstream
        # cookies (Set-Cookie is relayed to that client, untouched) with everybody's requests.
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                              cookie_jar=aiohttp.DummyCookieJar(),
                                              timeout=aiohttp.ClientTimeout(total=None),
                                              skip_auto_headers=("User-Agent", "Accept-Encoding"))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, upstream: UpstreamSettings, method: str, path_qs: str,
                   headers: Mapping[str, str], body: bytes | None) -> aiohttp.ClientResponse:
        """Send a request and wait for the response head; the caller releases the response."""
        assert self._session is not None, "UpstreamClient.start() was not awaited"
        url = upstream.base_url + path_qs
        try:
            return await self._session.request(method, url, headers=headers, data=body,
                                               timeout=_timeout(upstream.connect_timeout_s, upstream.timeout_s),
                                               allow_redirects=False)
        except asyncio.TimeoutError:
            raise UpstreamTimeout(f"upstream {upstream.name!r} did not answer within "
                                  f"{upstream.timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"upstream {upstream.name!r} is unreachable: "
                                      f"{describe(exc)}") from None


@lru_cache(maxsize=256)
def _timeout(connect_s: float, read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, connect=connect_s,
                                 sock_read=read_s)


async def read_body(response: aiohttp.ClientResponse, upstream: UpstreamSettings) -> bytes:
    try:
        return await response.read()
    except asyncio.TimeoutError:
        raise UpstreamTimeout(f"upstream {upstream.name!r} stopped answering "
                              f"(no data for {upstream.timeout_s:g}s)") from None
    except aiohttp.ClientError as exc:
        raise UpstreamUnavailable(f"upstream {upstream.name!r} broke off its answer: "
                                  f"{describe(exc)}") from None


def describe(exc: BaseException) -> str:
    """A short, credential-free description of a client error."""
    text = str(exc) or type(exc).__name__
    return text if len(text) < 300 else text[:300] + "..."


def upstream_path(request_path: str, query_string: str) -> str:
    """`/v1/chat/completions?x=1` -> `/chat/completions?x=1` (the base URL ends in /v1)."""
    path = request_path[3:] if request_path.startswith("/v1") else request_path
    return path + (f"?{query_string}" if query_string else "")
