"""Reading the client's request body, with its failures as the client's errors.

aiohttp decodes the body as it reads it (length, chunked framing, gzip/deflate) and enforces
`server.max_body_mb`; its exceptions become the proxy's own 400 and 413 here, inside the
handler, so the request line records the status the client gets. A body whose announced length
is already over the limit is refused before any of it is read, and a client that asked
`Expect: 100-continue` for it is not told to send it.

Pass-through uploads (`files.create`, `uploads.parts`, audio) can be far larger than a JSON
request: one over `server.max_body_mb` that says its length and is not JSON is streamed
upstream as it arrives (`streamed_upload`), up to `server.max_upload_mb`, never held whole.
"""

from __future__ import annotations

from aiohttp import hdrs, web
from aiohttp.web_urldispatcher import _default_expect_handler

from proxy.errors import BadRequest, PayloadTooLarge
from proxy.server.services import SERVICES
from proxy.settings import ServerSettings


async def read_client_body(request: web.Request, max_body_mb: float) -> bytes:
    if _announced_too_large(request, int(max_body_mb * 1024 * 1024)):
        # The body stays unread, so the connection cannot carry another request: say so.
        raise _too_large(max_body_mb, {"Connection": "close"})
    try:
        return await request.read()
    except web.RequestPayloadError:
        # After the answer aiohttp reads what is left of a body, and this one raises its
        # error again there, logged at ERROR as an unhandled exception. Nothing more of it
        # can be read: it ends here, and so does the connection, whose framing is lost.
        request.content.feed_eof()
        raise BadRequest("The request body could not be read: it does not match its "
                         "Content-Encoding or Transfer-Encoding.",
                         code="invalid_body_encoding", headers={"Connection": "close"}) from None
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(max_body_mb) from None


def streamed_upload(request: web.Request, server: ServerSettings) -> int | None:
    """The announced length of a pass-through body to stream upstream rather than read: over
    `max_body_mb`, not JSON (a JSON body is read for its `model`), not compressed (its length
    would not be its size). A 413 when it is over `max_upload_mb`; None for a body to read."""
    announced = request.headers.get(hdrs.CONTENT_LENGTH)
    length = int(announced) if announced is not None else 0  # aiohttp checked it is digits
    if (length <= server.max_body_bytes or hdrs.CONTENT_ENCODING in request.headers
            or _is_json(request.content_type)):
        return None
    if length > server.max_upload_bytes:
        raise PayloadTooLarge(f"The upload is larger than the proxy's limit of "
                              f"{server.max_upload_mb:g} MB (server.max_upload_mb).",
                              headers={"Connection": "close"})
    return length


async def expect_continue(request: web.Request) -> None:
    """aiohttp's answer to `Expect`, except for a body the handler will refuse: no 100 Continue
    then, and the 413 is the answer (RFC 9110 §10.1.1), so the client does not send it."""
    if not _announced_too_large(request, request.app[SERVICES].settings.server.max_body_bytes):
        await _default_expect_handler(request)


async def expect_upload(request: web.Request) -> None:
    """`expect_continue` for the pass-through routes, where an upload within
    `server.max_upload_mb` is streamed (its 413 beyond that is the handler's)."""
    try:
        streamed = streamed_upload(request, request.app[SERVICES].settings.server)
    except PayloadTooLarge:
        return
    if streamed is not None:
        await _default_expect_handler(request)
    else:
        await expect_continue(request)


def _announced_too_large(request: web.Request, max_bytes: int) -> bool:
    # A compressed body's length is not its size: that one is counted as it is inflated.
    # The header read directly (aiohttp's parser checked it is digits): every request asks,
    # and `request.content_length` costs as many steps again.
    length = request.headers.get(hdrs.CONTENT_LENGTH)  # `istr`: found without folding case
    return (length is not None and int(length) > max_bytes
            and hdrs.CONTENT_ENCODING not in request.headers)


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _too_large(max_body_mb: float, headers: dict[str, str] | None = None) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the proxy's limit of "
                           f"{max_body_mb:g} MB (server.max_body_mb).", headers=headers)
