"""What of a summarizer upstream's refusal reaches the client (`client_owned`): identifiers and
waits only when they read as such, a message redacted and clipped, and only a refusal of the
request's own credential (no `api_key`) is the client's."""

from __future__ import annotations

import orjson

from proxy.server.client_owned import client_refusal, read_refusal, refusal_error
from proxy.settings import UpstreamSettings

KEY = "sk-live-0123456789abcdefghij"


def _upstream(api_key: str | None = None) -> UpstreamSettings:
    return UpstreamSettings(name="u", base_url="http://127.0.0.1:9/v1", api_key=api_key)


def _body(**error: object) -> bytes:
    return orjson.dumps({"error": error})


def test_the_upstreams_identifiers_and_waits_pass_only_when_well_formed() -> None:
    read = read_refusal(429, _body(code="rate_limit_exceeded", type="tokens", message="slow"),
                        {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT", "retry-after-ms": "x"})
    assert (read.code, read.type) == ("rate_limit_exceeded", "tokens")
    assert read.retry_after == {"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}
    odd = read_refusal(429, _body(code="not an identifier", type=7, message=None),
                       {"Retry-After": "soon"})
    assert (odd.code, odd.type, odd.message, odd.retry_after) == (None, None, "", {})
    error = refusal_error(odd)
    assert error.headers == {"Retry-After": "1"}, "the proxy's usual wait"
    assert error.body()["error"]["code"] is None, "no code of the proxy's stands in"
    assert (error.status, error.body()["error"]["type"]) == (429, "rate_limit_error")
    assert read_refusal(401, b"<html>denied</html>", {}).code is None


def test_a_rate_limit_message_is_redacted_and_clipped() -> None:
    read = read_refusal(429, _body(message=f"limit for {KEY} " + "x" * 600), {})
    assert KEY not in read.message and "sk-***" in read.message
    assert len(read.message) <= 303


def test_a_refused_credentials_message_is_never_passed_on() -> None:
    read = read_refusal(401, _body(message="Incorrect API key provided: live-0123***hij",
                                   code="invalid_api_key"), {})
    error = refusal_error(read)
    assert (error.status, error.code) == (401, "invalid_api_key")
    assert "0123" not in error.message


def test_only_a_refusal_of_the_requests_own_credential_is_the_clients() -> None:
    for status in (401, 403, 429):
        refusal = read_refusal(status, b"{}", {})
        assert client_refusal(refusal, _upstream()) is refusal
        assert client_refusal(refusal, _upstream(api_key="sk-own-key")) is None
    for status in (400, 404, 500, 503):
        assert client_refusal(read_refusal(status, b"{}", {}), _upstream()) is None
    assert client_refusal(None, _upstream()) is None
