"""Reading the client's request body, with its failures as the client's errors.

aiohttp decodes the body as it reads it (length, chunked framing, gzip/deflate) and enforces
`server.max_body_mb`; its exceptions become the proxy's own 400 and 413 here, inside the
handler, so the request line records the status the client gets.
"""

from __future__ import annotations

from aiohttp import web

from proxy.errors import BadRequest, PayloadTooLarge


async def read_client_body(request: web.Request, max_body_mb: float) -> bytes:
    try:
        return await request.read()
    except web.RequestPayloadError:
        raise BadRequest("The request body could not be read: it does not match its "
                         "Content-Encoding or Transfer-Encoding.",
                         code="invalid_body_encoding") from None
    except web.HTTPRequestEntityTooLarge:
        raise PayloadTooLarge(f"The request body is larger than the proxy's limit of "
                              f"{max_body_mb:g} MB (server.max_body_mb).") from None
