"""The one shared upstream HTTP client, and the mapping of its failures to the proxy's errors.

One long-lived `ClientSession` with a bounded connection pool serves every upstream. It never
decompresses (a byte relay passes `Content-Encoding` through) and keeps no cookies. Low-level
failures become `UpstreamUnavailable` (502) or `UpstreamTimeout` (504) here and nowhere else.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from urllib.parse import unquote

import aiohttp
from aiohttp import hdrs
from multidict import CIMultiDict
from yarl import URL

from proxy.errors import BadRequest, NotFound, UpstreamTimeout, UpstreamUnavailable
from proxy.redaction import redact
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
        # An answer's header lines get the room a client's get (proxy/__main__.py), not
        # aiohttp's 8 KiB: a longer one (a big cookie) would be a 502 the client never had direct.
        self._session = aiohttp.ClientSession(connector=connector, auto_decompress=False,
                                              cookie_jar=aiohttp.DummyCookieJar(),
                                              timeout=aiohttp.ClientTimeout(total=None),
                                              max_line_size=65536, max_field_size=65536)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, upstream: UpstreamSettings, method: str, path_qs: str,
                   headers: Mapping[str, str], body: bytes | aiohttp.StreamReader | None
                   ) -> aiohttp.ClientResponse:
        """Send a request and wait for the response head; the caller releases the response.
        `body` may be the client's own stream (an upload sent on as it arrives).

        `path_qs` is sent as it is (percent-encoded, never normalized): see `upstream_path`."""
        assert self._session is not None, "UpstreamClient.start() was not awaited"
        url = _url(upstream.base_url, path_qs)
        try:
            if body is not None and (type(body) is not bytes or len(body) > _WATCHED_BODY):
                return await self._watched(upstream, method, url, headers, body)
            return await self._session.request(method, url, headers=headers, data=body,
                                               timeout=_timeout(upstream.connect_timeout_s, upstream.timeout_s),
                                               skip_auto_headers=_skip_auto_headers(headers),
                                               allow_redirects=False)
        except aiohttp.ConnectionTimeoutError:
            # No connection within connect_timeout_s: none free in the pool, or the upstream
            # accepted none. Caught before the answer's timeout, which it also is.
            raise UpstreamUnavailable(f"upstream {upstream.name!r} could not be connected to "
                                      f"within {upstream.connect_timeout_s:g}s") from None
        except asyncio.TimeoutError:
            raise UpstreamTimeout(f"upstream {upstream.name!r} did not answer within "
                                  f"{upstream.timeout_s:g}s") from None
        except aiohttp.ClientError as exc:
            raise UpstreamUnavailable(f"upstream {upstream.name!r} is unreachable: "
                                      f"{describe(exc)}") from None

    async def _watched(self, upstream: UpstreamSettings, method: str, url: URL,
                       headers: Mapping[str, str], body: bytes | bytearray | aiohttp.StreamReader
                       ) -> aiohttp.ClientResponse:
        """`send` for a body the sockets' buffers may not hold: aiohttp's read timeout starts
        once the whole body is written, so an upstream that stops reading it would hold the
        request (and a client's upload) for ever. Here `timeout_s` of it reading nothing is an
        `UpstreamTimeout`; the time spent waiting for the client's next piece is not counted."""
        assert self._session is not None
        if not isinstance(body, aiohttp.StreamReader):  # sized as it would be whole, not chunked
            headers = CIMultiDict(headers)
            headers[hdrs.CONTENT_LENGTH] = str(len(body))
        loop = asyncio.get_running_loop()
        silence = asyncio.timeout(None)

        def upstream_to_read(waiting: bool) -> None:
            silence.reschedule(loop.time() + upstream.timeout_s if waiting else None)

        try:
            async with silence:
                return await self._session.request(
                    method, url, headers=headers, data=_pieces(body, upstream_to_read),
                    timeout=_timeout(upstream.connect_timeout_s, upstream.timeout_s),
                    skip_auto_headers=_skip_auto_headers(headers), allow_redirects=False)
        except TimeoutError:
            if not silence.expired():
                raise
        raise UpstreamTimeout(f"upstream {upstream.name!r} read none of the request body for "
                              f"{upstream.timeout_s:g}s")


# A body larger than the sockets' buffers hold at their first sizes (Linux: 16 KiB to send,
# 128 KiB to receive) can stall while it is written: `_watched`.
_WATCHED_BODY = 1 << 17
_PIECE = 1 << 18


async def _pieces(body: bytes | bytearray | aiohttp.StreamReader,
                  upstream_to_read: Callable[[bool], None]) -> AsyncIterator[bytes | memoryview]:
    """`body` in pieces, telling `upstream_to_read` when the upstream has one to take (aiohttp
    asks for the next once the last is written and drained) and when the client's is awaited."""
    if not isinstance(body, aiohttp.StreamReader):
        whole = memoryview(body)  # its pieces are views, not copies
        for start in range(0, len(body), _PIECE):
            upstream_to_read(True)
            yield whole[start:start + _PIECE]  # type: ignore[misc]
    else:
        while True:
            upstream_to_read(False)
            piece = await body.readany()
            if not piece:
                break
            upstream_to_read(True)
            yield piece
    upstream_to_read(False)  # all written: the answer's read timeout takes over


def _skip_auto_headers(headers: Mapping[str, str]) -> tuple[str, ...] | None:
    """The headers aiohttp must not add: it gives a request without User-Agent, Accept or
    Accept-Encoding its own, and a POST without Content-Type `application/octet-stream`, and
    only the client's go upstream. None when all are there (a dict that spells them otherwise
    gets the safe answer). Not set on the session: there it makes aiohttp rebuild every
    request's header set to check them."""
    # Spelled out: 3 times faster than all(map(...)); aiohttp's `istr` names: a multidict finds
    # those without folding their case (a dict, as it finds the plain names).
    if (hdrs.USER_AGENT in headers and hdrs.ACCEPT_ENCODING in headers and hdrs.ACCEPT in headers
            and hdrs.CONTENT_TYPE in headers):
        return None
    return _AIOHTTP_ADDS


_AIOHTTP_ADDS = ("User-Agent", "Accept-Encoding", "Accept", "Content-Type")


@lru_cache(maxsize=256)
def _timeout(connect_s: float, read_s: float) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=None, sock_connect=connect_s, connect=connect_s,
                                 sock_read=read_s)


async def read_body(response: aiohttp.ClientResponse, upstream: UpstreamSettings) -> bytes:
    # A plain try, not `reading_answer`: this runs for every answer, and a generator-based
    # context manager costs more than the read's own bookkeeping.
    try:
        return await response.read()
    except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
        raise answer_failed(upstream, exc) from None


@contextmanager
def reading_answer(upstream: UpstreamSettings) -> Iterator[None]:
    """An upstream that fails while the proxy reads its answer, before the client saw any of
    it: see `answer_failed`."""
    try:
        yield
    except (asyncio.TimeoutError, aiohttp.ClientError) as exc:
        raise answer_failed(upstream, exc) from None


def answer_failed(upstream: UpstreamSettings,
                  exc: BaseException) -> UpstreamTimeout | UpstreamUnavailable:
    """The error for an answer that failed before the client saw any of it: 504 when the
    upstream went silent, 502 when it broke off."""
    if isinstance(exc, asyncio.TimeoutError):
        return UpstreamTimeout(f"upstream {upstream.name!r} stopped answering "
                               f"(no data for {upstream.timeout_s:g}s)")
    # An answer that broke no connection but the proxy's bound says so (`AnswerTooLarge`).
    return UpstreamUnavailable(f"upstream {upstream.name!r} broke off its answer: "
                               f"{describe(exc)}", code=getattr(exc, "error_code", None))


def describe(exc: BaseException) -> str:
    """A short, credential-free description of a client error."""
    if isinstance(exc, aiohttp.ClientResponseError):
        # Its text ends with the URL, and a base URL may carry a key in its query.
        text = f"{exc.status}, message={exc.message!r}"
    else:
        text = redact(str(exc) or type(exc).__name__)
    return text if len(text) < 300 else text[:300] + "..."


@lru_cache(maxsize=1024)
def _url(base_url: str, path_qs: str) -> URL:
    # A base URL's own query (an endpoint that takes its key as `?key=`) goes after the
    # client's path and before the client's query: appended whole, the path would land in it.
    # (Settings strip a trailing '/' from the whole URL only: `/v1/?key=` keeps its own.)
    # encoded=True: yarl would otherwise decode and re-encode the client's escapes.
    base = URL(base_url)
    path, _, query = path_qs.partition("?")
    query = "&".join(q for q in (base.raw_query_string, query) if q)
    return URL(str(base.with_query(None).with_fragment(None)).rstrip("/") + path
               + (f"?{query}" if query else ""), encoded=True)


# Clients send the same few paths on every request; a refused one is not remembered.
@lru_cache(maxsize=256)
def upstream_path(raw_path: str) -> str:
    """The client's path below `/v1` with its query, as the client encoded it:
    `/v1/models/org%2Fname?x=1` -> `/models/org%2Fname?x=1` (the base URL ends in /v1).

    Decoding or normalizing it would change what upstream sees (`%2F` in a model id, `%23`,
    `%3F`), and resolving `..` against the base URL would leave the upstream's base path with
    the proxy's own key; so a path with dot segments, encoded or not, is refused instead.
    """
    path, mark, query = raw_path.partition("?")
    if path != "/v1" and not path.startswith("/v1/"):
        raise NotFound(f"Unknown path {unquote(path)}: the proxy serves /v1/*, /healthz "
                       "and /metrics.")
    if ("%" in path or "/." in path or "\\" in path) and _has_dot_segment(path):
        raise BadRequest("The request path contains '.' or '..' segments; the proxy forwards "
                         "only paths below /v1 as they are.", code="invalid_path")
    return path[3:] + mark + query


def _has_dot_segment(path: str) -> bool:
    # Decoded once, as an upstream would; backslashes too, which some servers treat as `/`.
    segments = unquote(path, errors="surrogateescape").replace("\\", "/").split("/")
    return any(segment in (".", "..") for segment in segments)
