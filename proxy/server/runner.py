"""The aiohttp runner the proxy serves with: aiohttp's own, with connections that answer what
aiohttp's HTTP parser rejects in OpenAI's error shape, that let a request finish reading its
body after the shutdown began, and that leave compressed bodies to the handlers
(`proxy/server/client_body.py` inflates them, zstd too, held to `server.max_body_mb`).

aiohttp answers a request it cannot parse (a header line over the limit, too many headers,
control characters, ...) itself, before any middleware runs,
in plain text quoting the offending bytes. Those bytes may be a credential, so here the answer
and the log line name the kind of problem only. The connection is closed after the answer, as
aiohttp does.

A `CONNECT` (what a client given the proxy as its `HTTPS_PROXY` sends) reaches the proxy's own
answer through here too: aiohttp's router cannot route one (its URL has no path) and gives it
a plain-text 404, with no line and no count.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import hdrs, web
from aiohttp.http_exceptions import (BadHttpMessage, BadStatusLine, ContentLengthError,
                                     HttpProcessingError, InvalidHeader, InvalidURLError,
                                     LineTooLong, TransferEncodingError)

from proxy.errors import ProxyError
from proxy.server.serving import refuse_tunnel, render_error, unhandled_error
from proxy.server.logs import get_logger
from proxy.server.services import SERVICES, Services

_Kinds = type[BaseException] | tuple[type[BaseException], ...]
Handler = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]

# The handlers' words for the same broken body (`proxy/server/client_body.py`): one problem,
# one answer, whoever meets it.
_BODY_FRAMING = "The request body could not be read: it does not match its Transfer-Encoding."

# First match wins: subclasses before the classes they refine.
_PARSE_ERRORS: tuple[tuple[_Kinds, int, str, str], ...] = (
    (LineTooLong, 431, "request_header_too_large",
     "A request header line (or the request line) is longer than the proxy accepts."),
    ((TransferEncodingError, ContentLengthError), 400, "invalid_body_encoding", _BODY_FRAMING),
    (InvalidHeader, 400, "invalid_header", "A request header is malformed."),
    ((BadStatusLine, InvalidURLError), 400, "invalid_request_line",
     "The request line is malformed."),
    (HttpProcessingError, 400, "invalid_http_request",
     ("The request's HTTP head is malformed: for example too many headers, a repeated "
      "Content-Length or Host, a control character or a bare CR or LF in a header.")),
)


def parse_error(status: int, exc: BaseException | None) -> ProxyError:
    """The proxy's error for what aiohttp refused to hand to a handler, in its own words."""
    if _chunks_broke(exc):
        error = ProxyError(_BODY_FRAMING, code="invalid_body_encoding")
        error.status, error.type = 400, "invalid_request_error"
        return error
    for kinds, code_status, code, message in _PARSE_ERRORS:
        if isinstance(exc, kinds):
            error = ProxyError(message, code=code)
            error.status, error.type = code_status, "invalid_request_error"
            return error
    if status >= 500:
        return unhandled_error()
    error = ProxyError("The request could not be handled.")
    error.status, error.type = status, "invalid_request_error"
    return error


def _chunks_broke(exc: BaseException | None) -> bool:
    """A chunked body's framing broken in the read that brought its head: aiohttp's C parser
    then refuses the whole request with the class it uses for a malformed head, and only its
    words ("Invalid character in chunk size", "Expected LF after chunk data") tell them apart.
    (A malformed trailer reads as a malformed header, which it is.)"""
    # Its words only, not the bytes it quotes after them (a header's `chunked`).
    return (type(exc) is BadHttpMessage and isinstance(exc.message, str)
            and "chunk" in exc.message.partition(":")[0].lower())


try:  # aiohttp's record of a parse error, queued for the connection's next request (private)
    from aiohttp.web_protocol import _ErrInfo
except ImportError:  # a later aiohttp: such a body waits for the client again, nothing worse
    _ErrInfo = None
_DATA_RECEIVED = web.RequestHandler.data_received


class _Connection(web.RequestHandler):
    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        # Every read of every connection passes here: the usual one pays two lengths.
        messages = self._messages
        queued = len(messages)
        _DATA_RECEIVED(self, data)
        if len(messages) != queued and self._current_request is not None:
            self._framing_broke(self._current_request, messages[-1][0])

    @staticmethod
    def _framing_broke(request: web.BaseRequest, message: object) -> None:
        """A body's framing that breaks while its handler reads it (a chunk size that is no
        number): aiohttp's parser queues the error for the connection's next request and
        drops the body it was filling without a word, so the handler would wait for the rest
        until the client gave up. The body gets the error: the handler's 400."""
        body = request.content
        if (_ErrInfo is not None and isinstance(message, _ErrInfo) and not body.is_eof()
                and body.exception() is None):
            body.set_exception(web.RequestPayloadError("the request body's framing is invalid"))

    def handle_error(self, request: web.BaseRequest, status: int = 500,
                     exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        # aiohttp's `message` (and `str(exc)`) quote the request's bytes: neither is used.
        if request.writer.output_size > 0:
            # As aiohttp: once part of an answer went out, no error answer can follow it.
            raise ConnectionError("the response was under way; no error answer can follow")
        error = parse_error(status, exc)
        if isinstance(exc, HttpProcessingError):
            get_logger("proxy").warning("bad_http_request", status=error.status, error=error.code)
        else:
            # A fault outside the handlers (the `Expect` step, the router): a proxy bug, logged
            # as the handlers' own are, so one event name finds every 500 of the proxy's making.
            get_logger("proxy").error("unhandled_error", path=request.path, method=request.method,
                                      exc_info=exc)
        # Never reached a handler, so no request line counted it.
        metrics = getattr(self._manager, "metrics", None)
        if metrics is not None:
            metrics.observe_request("other", error.status, None)
        response = render_error(error)
        response.force_close()
        return response


class _Server(web.Server):
    metrics: Any = None  # the application's `Metrics`, for the requests no handler sees
    drain: Any = None  # the application's `Drain`, told when the shutdown begins

    def __call__(self) -> web.RequestHandler:
        return _Connection(self, loop=self._loop, **self._kwargs)

    def pre_shutdown(self) -> None:
        # aiohttp closes every connection here, and a closed connection drops the bytes that
        # arrive next: a request whose body was still coming in would wait out the grace and
        # get a 503. Such a connection only stops being kept alive; the idle ones close.
        # aiohttp takes keep-alive again from each answer: the request in progress is made
        # one whose client asked to close (its answer says `Connection: close`), and one
        # already answering is closed by `Drain.stopping` when it ends.
        if self.drain is not None:
            self.drain.stopping = True
        for connection in self._connections:
            if getattr(connection, "_request_in_progress", False):
                connection.keep_alive(False)
                _closes_after(getattr(connection, "_current_request", None))
            else:
                connection.close()


def _closes_after(request: web.BaseRequest | None) -> None:
    """`request` read as one whose client sent `Connection: close` (aiohttp's cached
    `keep_alive`, private: a later aiohttp without it still closes by `Drain.stopping`)."""
    cache = getattr(request, "_cache", None)
    if isinstance(cache, dict):
        cache["keep_alive"] = False


def _tunnels_refused(handle: Handler, services: Services) -> Handler:
    """`handle` (the application's), with a `CONNECT` answered by the proxy (`refuse_tunnel`)."""

    def route(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        # Not a coroutine itself: every other request's is awaited as it is, no frame more.
        if request.method == hdrs.METH_CONNECT:
            return refuse_tunnel(services, request)
        return handle(request)

    return route


class ProxyRunner(web.AppRunner):
    __slots__ = ()

    async def _make_server(self) -> web.Server:
        # aiohttp builds the application's server; this one is the same, but for the class
        # of the connections it makes.
        plain = await super()._make_server()
        # The parser then hands a compressed body over as it came: aiohttp reads no zstd here
        # and inflates a bomb far past the limit before refusing it.
        kwargs = {**plain._kwargs, "auto_decompress": False}
        services = self.app.get(SERVICES)
        handle = plain.request_handler
        if services is not None:
            handle = _tunnels_refused(handle, services)
        server = _Server(handle, request_factory=plain.request_factory,
                         handler_cancellation=plain.handler_cancellation, **kwargs)
        server.metrics = services.metrics if services is not None else None
        server.drain = services.drain if services is not None else None
        return server
