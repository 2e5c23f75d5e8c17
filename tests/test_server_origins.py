"""The memory of which upstream made each stored id, and which paths name one."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.conversation import Api
from proxy.inbound import parse_inbound
from proxy.server.origins import Origins, kept_upstream, origins_for, scoped_id
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


def test_the_oldest_id_goes_first_when_full() -> None:
    origins = Origins(max_entries=2)
    origins.remember("one", A)
    origins.remember("two", B)
    origins.remember("three", A)
    assert "one" not in origins and len(origins) == 2
    assert origins.upstream_of("two") is B and origins.upstream_of("three") is A


def test_an_answer_without_a_string_id_is_not_remembered() -> None:
    origins = Origins()
    for made_id in (None, "", 7, ["x"]):
        origins.remember(made_id, A)
    assert len(origins) == 0


def test_forgotten_ids_route_no_more() -> None:
    origins = Origins()
    origins.remember("resp_1", A)
    origins.forget("resp_1")
    origins.forget("never-made")
    assert origins.upstream_of("resp_1") is None


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
    key = "messages" if api is Api.CHAT else "input"
    body = {"model": "m", key: [{"role": "user", "content": "Hi."}], **fields}
    assert kept_upstream(parse_inbound(api, orjson.dumps(body))) is kept


def _settings(routes: list[dict[str, str]] | None) -> dict[str, Any]:
    raw: dict[str, Any] = {"upstreams": {"a": {"base_url": "http://a.test/v1"},
                               "b": {"base_url": "http://b.test/v1"}}}
    if routes is None:
        raw["upstreams"].pop("b")
    else:
        raw["routes"] = routes
    return raw


def test_nothing_is_remembered_when_every_route_names_the_same_upstream() -> None:
    assert origins_for(parse_settings(_settings(None), {})) is None
    same = [{"model": "gpt-*", "upstream": "a"}, {"model": "*", "upstream": "a"}]
    assert origins_for(parse_settings(_settings(same), {})) is None
    several = [{"model": "claude-*", "upstream": "b"}, {"model": "*", "upstream": "a"}]
    assert isinstance(origins_for(parse_settings(_settings(several), {})), Origins)
