"""The memory of which upstream made each stored id, and which paths name one."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from proxy.conversation import Api
from proxy.inbound import parse_inbound
from proxy.inbound import Inbound
from proxy.server.origins import (Origins, answer_id, asked_by_id, kept_upstream, origins_for,
                                  scoped_id)
from proxy.records import ThreadKey
from proxy.server.prepared import Prepared
from proxy.server.request_line import RequestLine
from proxy.server.shared_waits import SHARED_WAIT_S, anchor_written
from proxy.threads import ThreadIdentity
from proxy.settings import UpstreamSettings, parse_settings

A = UpstreamSettings("a", "http://a.test/v1")
B = UpstreamSettings("b", "http://b.test/v1")


@pytest.mark.parametrize(("tail", "made_id"), [
    ("responses/resp_1", "resp_1"),
    ("responses/resp_1/cancel", "resp_1"),
    ("responses/resp_1/input_items", "resp_1"),
    ("chat/completions/chatcmpl-1", "chatcmpl-1"),
    ("chat/completions/chatcmpl-1/messages", "chatcmpl-1"),
    ("responses", None),
    ("responses/", None),
    ("chat/completions", None),
    ("chat/completions/", None),
    ("chat/other/x", None),
    ("models/gpt-4o", None),
    ("files/file-1", None),
    ("", None),
])
def test_scoped_id_reads_the_id_of_a_stored_answer_path(tail: str, made_id: str | None) -> None:
    assert scoped_id(tail) == made_id


def _origins(max_entries: int = 10) -> Origins:
    return Origins({"a": A, "b": B}, None, lambda: 0.0, max_entries=max_entries)


def test_the_oldest_id_goes_first_when_full() -> None:
    origins = _origins(max_entries=2)
    origins.remember("one", A)
    origins.remember("two", B)
    origins.remember("three", A)
    assert "one" not in origins and len(origins) == 2
    assert "two" in origins and "three" in origins


async def test_an_answer_without_a_string_id_is_not_remembered() -> None:
    origins = _origins()
    prepared = _prepared(Api.RESPONSES, {})
    for answer in (b"", b"null", b"[]", b"{}", b'{"id": null}', b'{"id": ""}', b'{"id": 7}',
                   b'{"id": ["x"]}', b'{"id": "resp_1'):
        await origins.answer_made(prepared, answer)
    assert len(origins) == 0
    await origins.answer_made(prepared, b'{"id": "resp_1"}')
    assert await origins.upstream_of("resp_1") is A


@pytest.mark.parametrize(("data", "made_id"), [
    (b'{"id":"chatcmpl-1","object":"chat.completion"}', "chatcmpl-1"),
    (b'{\n  "id": "resp_0a1b",\n  "object": "response"}', "resp_0a1b"),
    (b'{"object": "response", "id": "resp_later"}', "resp_later"),
    (b'{"id": "resp_\\u0041", "x": 1}', "resp_A"),
    (b'{"id": "resp_cut', None),
    (b'not json', None),
])
def test_answer_id_reads_the_leading_id_or_parses(data: bytes, made_id: str | None) -> None:
    assert answer_id(data) == made_id


async def test_forgotten_ids_route_no_more() -> None:
    origins = _origins()
    origins.remember("resp_1", A)
    origins.forget("resp_1")
    origins.forget("never-made")
    assert await origins.upstream_of("resp_1") is None


@pytest.mark.parametrize(("api", "fields", "kept"), [
    (Api.CHAT, {}, False),
    (Api.CHAT, {"store": True}, True),
    (Api.CHAT, {"store": "true"}, False),
    (Api.RESPONSES, {}, True),
    (Api.RESPONSES, {"store": False}, False),
    (Api.RESPONSES, {"background": True}, True),
])
def test_kept_upstream_follows_each_apis_store_default(api: Api, fields: dict[str, Any],
                                                      kept: bool) -> None:
    assert kept_upstream(_inbound(api, fields)) is kept


@pytest.mark.parametrize(("api", "fields", "asked"), [
    (Api.CHAT, {"store": True}, True),
    (Api.RESPONSES, {}, False),
    (Api.RESPONSES, {"background": True}, True),
    (Api.RESPONSES, {"background": "yes"}, False),
])
def test_what_is_asked_for_by_id_by_design(api: Api, fields: dict[str, Any], asked: bool) -> None:
    assert asked_by_id(_inbound(api, fields)) is asked


def _inbound(api: Api, fields: dict[str, Any]) -> Inbound:
    key = "messages" if api is Api.CHAT else "input"
    body = {"model": "m", key: [{"role": "user", "content": "Hi."}], **fields}
    return parse_inbound(api, orjson.dumps(body))


def _prepared(api: Api, fields: dict[str, Any]) -> Prepared:
    return Prepared(_inbound(api, fields), ThreadIdentity(None, "none", "t"), A, {}, b"")


def _settings(routes: list[dict[str, str]] | None) -> dict[str, Any]:
    raw: dict[str, Any] = {"upstreams": {"a": {"base_url": "http://a.test/v1"},
                               "b": {"base_url": "http://b.test/v1"}}}
    if routes is None:
        raw["upstreams"].pop("b")
    else:
        raw["routes"] = routes
    return raw


def test_nothing_is_remembered_when_every_route_names_the_same_upstream() -> None:
    def made(routes: list[dict[str, str]] | None) -> Origins | None:
        return origins_for(parse_settings(_settings(routes), {}), None, lambda: 0.0)

    assert made(None) is None
    assert made([{"model": "gpt-*", "upstream": "a"}, {"model": "*", "upstream": "a"}]) is None
    assert isinstance(made([{"model": "claude-*", "upstream": "b"},
                            {"model": "*", "upstream": "a"}]), Origins)


class _Rows:
    """The origin half of a store: what was written, and whether other instances share it."""

    def __init__(self, shared: bool) -> None:
        self.shared = shared
        self.rows: dict[str, str] = {}

    async def add_origin(self, made_id: str, upstream: str, at: float) -> None:
        self.rows[made_id] = upstream

    async def origin_written(self, made_id: str) -> None:
        pass  # written at once

    async def origin(self, made_id: str) -> str | None:
        return self.rows.get(made_id)


@pytest.mark.parametrize(("shared", "written"), [(False, ["resp_bg"]),
                                                 (True, ["resp_plain", "resp_bg"])])
async def test_a_shared_store_gets_plain_stored_responses_too(shared: bool,
                                                              written: list[str]) -> None:
    """Another instance has only the store to ask where a chain's response lives."""
    rows = _Rows(shared)
    origins = Origins({"a": A, "b": B}, rows, lambda: 0.0)  # type: ignore[arg-type]
    await origins.answer_made(_prepared(Api.RESPONSES, {}), b'{"id": "resp_plain"}')
    await origins.answer_made(_prepared(Api.RESPONSES, {"background": True}), b'{"id": "resp_bg"}')
    await origins.answer_made(_prepared(Api.RESPONSES, {"store": False}), b'{"id": "resp_gone"}')
    assert list(rows.rows) == written
    other = Origins({"a": A, "b": B}, rows, lambda: 0.0)  # type: ignore[arg-type]
    assert (await other.upstream_of("resp_plain") is A) is shared


class _Stalled(_Rows):
    """A shared store that takes writes and never says they landed (a stalled Redis)."""

    def __init__(self) -> None:
        super().__init__(True)

    async def origin_written(self, made_id: str) -> None:
        await asyncio.Event().wait()

    async def written(self, key: ThreadKey) -> None:
        await asyncio.Event().wait()


class _Warnings(list[str]):
    def warning(self, event: str, **facts: Any) -> None:
        self.append(event)


async def test_an_answers_origin_and_anchor_waits_share_one_deadline() -> None:
    """A store that does not answer holds an answer `SHARED_WAIT_S` in all, not once a write."""
    store, warnings = _Stalled(), _Warnings()
    origins = Origins({"a": A, "b": B}, store, lambda: 0.0, warnings)
    prepared = _prepared(Api.RESPONSES, {})
    prepared.key = ThreadKey("t", "thread")
    loop = asyncio.get_running_loop()
    started = loop.time()
    await origins.answer_made(prepared, b'{"id": "resp_1"}')
    await anchor_written(store, warnings, prepared, RequestLine(None))  # type: ignore[arg-type]
    waited = loop.time() - started
    assert warnings == ["origin_not_recorded", "usage_not_recorded"]
    # Two waits of their own would take twice the cap; the margin is for a loaded machine.
    assert SHARED_WAIT_S <= waited < 1.6 * SHARED_WAIT_S
