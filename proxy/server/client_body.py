"""Reading the client's request body, with its failures as the client's errors.

aiohttp reads the body (length, chunked framing) and enforces `server.max_body_mb` on the bytes
that arrive; its exceptions become the proxy's own 400 and 413 here, inside the handler, so the
request line records the status the client gets. A body whose announced length is already over
the limit is refused before any of it is read, and a client that asked `Expect: 100-continue`
for it is not told to send it.

A compressed body (`Content-Encoding`: gzip, deflate, br, zstd, or several of them) is inflated
here, not by aiohttp (the runner turns its decoding off): aiohttp reads zstd only with a package
the proxy does not use, and inflated far past the limit before refusing a bomb. Here every coding
goes through the inflaters answers use, bounded by `server.max_body_mb` inflated (a 413 past
it), a mebibyte at a time. What goes upstream is the plain body, without the header (an
upstream may read no coding at all; the proxy's headers drop it). An unknown coding is a 415
before anything is read; a body that is not what its coding says, a 400.

Codex CLI sends zstd bodies (level 3) to OpenAI's own backend; other clients may gzip theirs.

Pass-through uploads (`files.create`, `uploads.parts`, audio) can be far larger than a JSON
request: one over `server.max_body_mb` that says its length and is neither JSON nor compressed
is streamed upstream as it arrives (`streamed_upload`), up to `server.max_upload_mb`, never held
whole.
"""

from __future__ import annotations

from aiohttp import ClientPayloadError, hdrs, web
from aiohttp.web_urldispatcher import _default_expect_handler
from multidict import CIMultiDictProxy

from proxy.errors import BadRequest, PayloadTooLarge, UnsupportedContentEncoding
from proxy.server.inflate import AnswerTooLarge, inflater
from proxy.server.services import SERVICES
from proxy.settings import ServerSettings


async def read_client_body(request: web.Request, max_body_mb: float) -> bytes:
    """The body, plain: inflated as its `Content-Encoding` says, to at most `max_body_mb`."""
    codings = content_codings(request.headers)
    max_bytes = int(max_body_mb * 1024 * 1024)
    # Both refused unread, so the connection cannot carry another request: say so. (A coding
    # of no body at all, a stray header, costs nothing to ignore.)
    if not readable(codings) and request.can_read_body:
        raise _unsupported(codings)
    if _announced_too_large(request, max_bytes):
        raise _too_large(max_body_mb, {"Connection": "close"})
    try:
        body = await request.read()
    except web.RequestPayloadError:
        # After the answer aiohttp reads what is left of a body, and this one raises its
        # error again there, logged at ERROR as an unhandled exception. Nothing more of it
        # can be read: it ends here, and so does the connection, whose framing is lost.
        request.content.feed_eof()
        raise BadRequest("The request body could not be read: it does not match its "
                         "Transfer-Encoding.",
                         code="invalid_body_encoding", headers={"Connection": "close"}) from None
    except web.HTTPRequestEntityTooLarge:
        raise _too_large(max_body_mb) from None
    for coding in reversed(codings if body else ()):  # the last applied is undone first
        body = _inflated(body, coding, max_body_mb, max_bytes)
    return body


_READABLE = frozenset({"gzip", "x-gzip", "deflate", "br", "zstd"})


def content_codings(headers: CIMultiDictProxy[str]) -> tuple[str, ...]:
    """The codings applied to the body, in the order they were applied, lower case; `identity`
    (no coding) left out. Several header lines are one list (RFC 9110 §5.3)."""
    lines = headers.getall(hdrs.CONTENT_ENCODING, ())
    if not lines:  # nearly every request: no generators built for it
        return ()
    return tuple(name for line in lines
                 for name in (item.strip().lower() for item in line.split(","))
                 if name and name != "identity")


def readable(codings: tuple[str, ...]) -> bool:
    return all(coding in _READABLE for coding in codings)


def _inflated(body: bytes, coding: str, max_body_mb: float, max_bytes: int) -> bytes:
    inflate = inflater(coding, max_bytes)
    assert inflate is not None  # `readable` said so
    try:
        plain = inflate(body)
    except AnswerTooLarge:
        raise _too_large(max_body_mb) from None
    except ClientPayloadError:
        raise BadRequest(f"The request body could not be read: it is not the {coding} its "
                         f"Content-Encoding says.", code="invalid_body_encoding") from None
    # Its framing whole but its coding cut short: inflated as far as it goes, it would pass
    # for the client's whole body. (Not known only for a zstd body of absurdly small blocks.)
    if inflate.ended is False:
        raise BadRequest(f"The request body could not be read: its {coding} data is cut short.",
                         code="invalid_body_encoding")
    return plain


def streamed_upload(request: web.Request, server: ServerSettings) -> int | None:
    """The announced length of a pass-through body to stream upstream rather than read: over
    `max_body_mb`, not JSON (a JSON body is read for its `model`), not compressed (it goes
    upstream inflated, and its length would not be its size). A 413 when it is over
    `max_upload_mb`; None for a body to read."""
    announced = request.headers.get(hdrs.CONTENT_LENGTH)
    length = int(announced) if announced is not None else 0  # aiohttp checked it is digits
    if (length <= server.max_body_bytes or _is_json(request.content_type)
            or content_codings(request.headers)):
        return None
    if length > server.max_upload_bytes:
        raise PayloadTooLarge(f"The upload is larger than the proxy's limit of "
                              f"{server.max_upload_mb:g} MB (server.max_upload_mb).",
                              headers={"Connection": "close"})
    return length


async def expect_continue(request: web.Request) -> None:
    """aiohttp's answer to `Expect`, except for a body the handler will refuse unread: no 100
    Continue then, and the 413 or 415 is the answer (RFC 9110 §10.1.1), so the client does not
    send it."""
    max_bytes = request.app[SERVICES].settings.server.max_body_bytes
    if readable(content_codings(request.headers)) and not _announced_too_large(request,
                                                                               max_bytes):
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
    # A compressed body over the limit is over it inflated too (compression adds a few bytes
    # to incompressible data at most), and aiohttp holds the bytes read to the limit anyway.
    # The header read directly (aiohttp's parser checked it is digits): every request asks,
    # and `request.content_length` costs as many steps again.
    length = request.headers.get(hdrs.CONTENT_LENGTH)  # `istr`: found without folding case
    return length is not None and int(length) > max_bytes


def _is_json(content_type: str) -> bool:
    return content_type == "application/json" or content_type.endswith("+json")


def _unsupported(codings: tuple[str, ...]) -> UnsupportedContentEncoding:
    unknown = next(coding for coding in codings if coding not in _READABLE)
    return UnsupportedContentEncoding(
        f"The request body's Content-Encoding {unknown!r} is not one the proxy can read: send "
        f"it uncompressed, or as gzip, deflate, br or zstd.", headers={"Connection": "close"})


def _too_large(max_body_mb: float, headers: dict[str, str] | None = None) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body is larger than the proxy's limit of "
                           f"{max_body_mb:g} MB (server.max_body_mb).", headers=headers)
