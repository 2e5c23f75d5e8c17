"""Which headers cross the proxy: for any header lines, in any case, repeated or not, what
`upstream_request_headers` and `client_response_headers` keep is what RFC 9110 says, in the
order and case they came; aiohttp's header types take the way that finds them in C."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.server import headers as headers_module
from proxy.server.headers import (HOP_BY_HOP, client_response_headers,
                                  upstream_request_headers)
from proxy.server.relay import whole_response

_KNOWN = ["Host", "Content-Length", "Content-Type", "Content-Encoding", "Expect", "Connection",
          "Keep-Alive", "TE", "Transfer-Encoding", "Upgrade", "Authorization", "X-Api-Key",
          "Api-Key", "User-Agent", "Accept", "Accept-Encoding", "Server", "Date", "X-Thread-Id",
          "X-Custom", "X-Request-Id", "Set-Cookie", "OpenAI-Organization", "OpenAI-Project"]
_NAME = st.one_of(
    st.sampled_from(_KNOWN).flatmap(
        lambda name: st.sampled_from([name, name.lower(), name.upper()])),
    st.from_regex(r"\A[A-Za-z][A-Za-z0-9-]{0,8}\Z"))
_VALUE = st.one_of(st.sampled_from(["", "x", "close", "keep-alive", "X-Custom, te",
                                    " x-request-id ,, Upgrade", "gzip"]),
                   st.sampled_from(_KNOWN), st.from_regex(r"\A[ -~]{0,12}\Z"))
_LINE = st.one_of(st.tuples(_NAME, _VALUE), st.tuples(st.just("Connection"), _NAME))
_LINES = st.lists(_LINE, max_size=12)
_NAMED_BY_CONNECTION = [("Connection", "x-custom"), ("X-Custom", "1"), ("x-request-id", "2"),
                        ("CONNECTION", "X-Request-Id, keep-alive")]
_DROP = st.lists(st.sampled_from(["x-thread-id", "X-Custom", "session_id"]), max_size=2)


def _kept(lines: list[tuple[str, str]], dropped: set[str]) -> list[tuple[str, str]]:
    """The oracle: every line whose name, in any case, is neither dropped nor named by a
    Connection line."""
    named = {token.strip().lower() for name, value in lines if name.lower() == "connection"
             for token in value.split(",") if token.strip()}
    gone = {name.lower() for name in dropped} | named
    return [(name, value) for name, value in lines if name.lower() not in gone]


@example(lines=_NAMED_BY_CONNECTION, drop=[], api_key=None)
@given(lines=_LINES, drop=_DROP, api_key=st.sampled_from([None, "", "sk-up"]))
def test_request_headers_keep_exactly_what_may_cross(lines, drop, api_key) -> None:
    client = CIMultiDictProxy(CIMultiDict(lines))
    out = upstream_request_headers(client, api_key=api_key, drop=drop, identity_encoding=True)
    dropped = set(HOP_BY_HOP) | {"host", "content-length", "content-encoding", "expect", *drop}
    if api_key:
        dropped |= {"authorization", "api-key", "x-api-key", "openai-organization",
                    "openai-project"}
    expected = CIMultiDict(_kept(lines, dropped))
    if api_key:
        expected["Authorization"] = f"Bearer {api_key}"
    expected["Accept-Encoding"] = "identity"
    assert list(out.items()) == list(expected.items())


@example(lines=_NAMED_BY_CONNECTION, extra=None)
@given(lines=_LINES, extra=st.sampled_from([None, {}, {"X-Proxy": "1", "content-type": "t"}]))
def test_response_headers_keep_exactly_what_may_cross(lines, extra) -> None:
    out = client_response_headers(CIMultiDictProxy(CIMultiDict(lines)), extra)
    expected = CIMultiDict(_kept(lines, set(HOP_BY_HOP) | {"content-length", "server", "date"}))
    expected.update(extra or {})
    assert list(out.items()) == list(expected.items())


@example(lines=_NAMED_BY_CONNECTION, extra=None)
@given(lines=_LINES, extra=st.sampled_from([None, {}, {"X-Proxy": "1", "content-type": "t"}]))
def test_a_whole_answer_goes_out_with_the_response_headers(lines, extra) -> None:
    """`whole_response` strips its own copy of the upstream's headers in place: the same
    headers, in the same order, as `client_response_headers` makes from its copy."""
    upstream = CIMultiDictProxy(CIMultiDict(lines))
    out = whole_response(200, "OK", upstream, b"{}", extra)
    assert list(out.headers.items()) == list(client_response_headers(upstream, extra).items())
    assert (out.status, out.reason, out.body) == (200, "OK", b"{}")
    assert list(upstream.items()) == lines  # the upstream's own headers are left as they came


@given(lines=st.lists(st.tuples(_NAME, _VALUE), max_size=12, unique_by=lambda kv: kv[0].lower()))
def test_a_plain_mapping_keeps_the_same_headers(lines) -> None:
    """A dict (no repeated names) takes the general way: the same headers come out. (A dict
    finds its Connection line as `connection` or `Connection` only; aiohttp's headers are
    never a dict.)"""
    lines = [(name, value) for name, value in lines
             if name.lower() != "connection" or name in ("connection", "Connection")]
    assert list(client_response_headers(dict(lines)).items()) == list(
        client_response_headers(CIMultiDictProxy(CIMultiDict(lines))).items())


def test_aiohttp_headers_take_the_caseless_way() -> None:
    # Else the tests above only check the general way twice.
    assert headers_module._CASELESS_KEY_SETS
    assert CIMultiDictProxy in headers_module._CASELESS
