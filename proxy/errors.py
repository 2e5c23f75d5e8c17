"""The errors the proxy itself makes, each knowing its HTTP status and OpenAI error type.

Upstream 4xx/5xx answers are data to relay, never these. Everything here renders into
OpenAI's error shape `{"error": {"message", "type", "param", "code"}}` in exactly one place
(`ProxyError.body`), so a client's SDK raises its usual exception for our errors too.
"""

from __future__ import annotations

from typing import Any


class ProxyError(Exception):
    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


class BadRequest(ProxyError):
    status = 400
    type = "invalid_request_error"


class PayloadTooLarge(ProxyError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class UnsupportedContentEncoding(ProxyError):
    status = 415
    type = "invalid_request_error"
    code = "unsupported_content_encoding"


class NotFound(ProxyError):
    status = 404
    type = "invalid_request_error"
    code = "not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    type = "invalid_request_error"
    code = "method_not_allowed"


class NotImplementedHere(ProxyError):
    status = 501
    type = "invalid_request_error"


class UpstreamUnavailable(ProxyError):
    status = 502
    code = "upstream_unreachable"


class UpstreamTimeout(ProxyError):
    status = 504
    code = "upstream_timeout"


class ShuttingDown(ProxyError):
    """The proxy is stopping and cut the request off when `server.shutdown_grace_s` ended."""

    status = 503
    code = "proxy_shutting_down"


class CompactionInsufficient(ProxyError):
    """The projection cannot be brought under the model's window: the thread must restart."""

    status = 400
    type = "invalid_request_error"
    code = "context_compaction_insufficient"


class CompactionUnavailable(ProxyError):
    """Compaction is needed but the summarizer is failing (breaker open)."""

    status = 503
    code = "compaction_unavailable"


class SummarizerRefused(CompactionUnavailable):
    """Compaction is needed, and the summarizer's upstream refused the request's own credential
    (401, 403) or rate-limited it (429): the client's to fix or to wait out, so it gets that
    status, not a 503. A `CompactionUnavailable` still, for what handles one (the retry an
    upstream overflow bought answers with the upstream's own error)."""

    def __init__(self, message: str, *, status: int, type_: str, code: str | None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message, code=code, headers=headers)
        self.code = code  # None too: no code of ours stands in for the upstream's
        self.status = status
        self.type = type_


def error_body(message: str, type_: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}
