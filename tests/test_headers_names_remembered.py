"""The header names to drop are remembered per list of names (clients send the same ones on
every request): what a remembered list drops is what the names drop, whatever their case,
order and repeats; a Connection header is read anew each time; and the memory is bounded."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from proxy.server import headers
from proxy.server.headers import client_response_headers, upstream_request_headers

_NAMES = st.sampled_from(["Host", "host", "Content-Length", "content-length", "User-Agent",
                          "Accept", "Authorization", "X-Thread-Id", "x-thread-id", "Keep-Alive",
                          "Expect", "Content-Encoding", "Server", "Date", "TE", "X-Custom",
                          "Transfer-Encoding", "Api-Key"])
_HEADERS = st.lists(st.tuples(_NAMES, st.sampled_from(["a", "b", "1"])), max_size=10)


def _expected(items: list[tuple[str, str]], dropped: set[str]) -> list[tuple[str, str]]:
    return [(name, value) for name, value in items if name.lower() not in dropped]


@pytest.fixture(autouse=True)
def _forget() -> None:
    headers._PRESENT.clear()


@given(items=_HEADERS, api_key=st.sampled_from([None, "sk-up"]))
def test_a_remembered_list_of_names_drops_what_the_names_drop(items: list[tuple[str, str]],
                                                             api_key: str | None) -> None:
    client = CIMultiDictProxy(CIMultiDict(items))
    dropped = set(headers._request_drop(("x-thread-id",), bool(api_key)))
    first = upstream_request_headers(client, api_key=api_key, drop=("X-Thread-Id",))
    again = upstream_request_headers(client, api_key=api_key, drop=("X-Thread-Id",))
    kept = _expected(items, dropped) + ([("Authorization", "Bearer sk-up")] if api_key else [])
    assert list(first.items()) == list(again.items()) == kept


@given(items=_HEADERS)
def test_an_answer_s_remembered_names_drop_what_the_names_drop(
        items: list[tuple[str, str]]) -> None:
    upstream = CIMultiDictProxy(CIMultiDict(items))
    for _ in range(2):
        assert list(client_response_headers(upstream).items()) == _expected(
            items, set(headers._RESPONSE_DROP))


def test_the_names_of_a_request_are_remembered_once() -> None:
    client = CIMultiDictProxy(CIMultiDict([("Host", "h"), ("Accept", "*/*"),
                                           ("Content-Length", "2")]))
    upstream_request_headers(client, api_key=None)
    assert list(headers._PRESENT.values()) == [frozenset({"Host", "Content-Length"})]
    upstream_request_headers(client, api_key=None)
    assert len(headers._PRESENT) == 1


def test_a_connection_header_names_its_own_hop_by_hop_headers_each_time() -> None:
    def sent(tokens: str) -> list[tuple[str, str]]:
        client = CIMultiDictProxy(CIMultiDict([("Connection", tokens), ("X-A", "1"),
                                               ("X-B", "2")]))
        return list(upstream_request_headers(client, api_key=None).items())

    assert sent("x-a") == [("X-B", "2")]
    assert sent("X-B") == [("X-A", "1")]  # the same names, another Connection value
    assert headers._PRESENT == {}


def test_the_memory_is_bounded() -> None:
    for n in range(headers._MAX_PRESENT + 50):
        upstream_request_headers(CIMultiDictProxy(CIMultiDict([(f"X-{n}", "1")])), api_key=None)
    assert 0 < len(headers._PRESENT) <= headers._MAX_PRESENT
    headers._PRESENT.clear()
    long_names = CIMultiDictProxy(CIMultiDict([("X-" + "a" * headers._MAX_NAMES_CHARS, "1"),
                                               ("Host", "h")]))
    assert list(upstream_request_headers(long_names, api_key=None).keys()) == [
        "X-" + "a" * headers._MAX_NAMES_CHARS]
    assert headers._PRESENT == {}  # a client's huge names are not kept
