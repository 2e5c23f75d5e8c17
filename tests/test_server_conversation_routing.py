"""A Responses request that continues state kept upstream (a conversation, a stored response)
reaches the upstream that holds it, whatever its model routes to; and a conversation's own
model-less requests go where it was made."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import brotli
import httpx
import openai
import pytest
from aiohttp import web

from proxy.server.origins import Origins, continued_id, names_the_object, scoped_id
from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream
from tests.conftest import API_KEY
from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy

# `claude-*` goes to `other`; everything else, a model-less request too, to `fake` (`main`).
ROUTES = [{"model": "claude-*", "upstream": "other"}, {"model": "*", "upstream": "fake"}]
ON_OTHER = {"model": "claude-sonnet"}  # a model-less request's query that routes it to `other`


@pytest.fixture
def pair(make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
         ) -> tuple[FakeUpstream, FakeUpstream, RunningProxy]:
    main, other = make_fake(), make_fake()
    return main, other, make_proxy(main, upstreams={"other": {"base_url": other.url}},
                                   routes=ROUTES)


def _texts(items: Any) -> list[str]:
    return [part.text for item in items.data if item.type == "message" for part in item.content]


@pytest.mark.parametrize("named", [str, lambda made_id: {"id": made_id}])
def test_a_response_in_a_conversation_goes_where_the_conversation_is(
        pair: Any, make_client: Callable[..., openai.OpenAI], named: Callable[[str], Any]) -> None:
    main, other, proxy = pair
    client = make_client(proxy.base_url)
    conversation = client.conversations.create()  # no model: made on `main`
    first = client.responses.create(model="claude-sonnet", input="Say hello.",
                                    conversation=named(conversation.id))
    second = client.responses.create(model="claude-sonnet", input="Again.",
                                     conversation=named(conversation.id))
    assert first.conversation.id == second.conversation.id == conversation.id
    # The second turn continued the first one's items, kept where both were made.
    assert _texts(client.conversations.items.list(conversation.id, order="asc"))[:2] == [
        "Say hello.", first.output_text]
    assert other.requests == []
    line = proxy.requests()[-2]
    assert line["routed_by"] == "id" and line["upstream"] == "fake" and line["conversation"]


def test_a_conversation_made_on_a_routed_upstream_is_used_there_until_deleted(
        pair: Any, make_client: Callable[..., openai.OpenAI]) -> None:
    main, other, proxy = pair
    client = make_client(proxy.base_url)
    made = client.conversations.create(items=[{"type": "message", "role": "user",
                                               "content": "Remember the number 7."}],
                                       extra_query=ON_OTHER)
    assert client.conversations.retrieve(made.id).id == made.id
    updated = client.conversations.update(made.id, metadata={"topic": "numbers"})
    assert updated.metadata == {"topic": "numbers"}
    answer = client.responses.create(model="gpt-4o", input="Which number?", conversation=made.id)
    assert answer.conversation.id == made.id
    items = client.conversations.items.list(made.id, order="asc")
    assert _texts(items)[:2] == ["Remember the number 7.", "Which number?"]
    # Deleting one of its items leaves the conversation where it is.
    client.conversations.items.delete(items.data[0].id, conversation_id=made.id)
    assert made.id in proxy.app[SERVICES].origins
    assert _texts(client.conversations.items.list(made.id, order="asc"))[0] == "Which number?"
    assert client.conversations.delete(made.id).deleted is True
    assert made.id not in proxy.app[SERVICES].origins
    assert main.requests == []


def test_a_conversation_is_found_where_it_was_made_after_a_restart(
        make_fake: Callable[..., FakeUpstream], loop_thread: LoopThread, tmp_path: Any,
        make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), make_fake()
    settings = proxy_settings(main.url, str(tmp_path / "state"),
                              upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    first = loop_thread.run(start_proxy(settings))
    try:
        made = make_client(first.base_url).conversations.create(extra_query=ON_OTHER)
    finally:
        loop_thread.run(stop_proxy(first))
    second = loop_thread.run(start_proxy(settings))
    try:
        client = make_client(second.base_url)
        assert client.conversations.retrieve(made.id).id == made.id
        assert client.responses.create(model="gpt-4o", input="Hi.",
                                       conversation=made.id).conversation.id == made.id
    finally:
        loop_thread.run(stop_proxy(second))
    assert main.requests == []


class BrotliUpstream(FakeUpstream):
    """The fake, answering a client that accepts `br` with its body in that encoding."""

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.insert(0, self._encode)
        return app

    @web.middleware
    async def _encode(self, request: web.Request, handler: Any) -> web.StreamResponse:
        answer = await handler(request)
        if "br" not in request.headers.get("Accept-Encoding", ""):
            return answer
        assert isinstance(answer, web.Response) and answer.body is not None
        return web.Response(status=answer.status, body=brotli.compress(bytes(answer.body)),
                            content_type="application/json", headers={"Content-Encoding": "br"})


def test_a_conversation_is_remembered_whatever_encodings_its_client_accepts(
        make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
        loop_thread: LoopThread, make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), BrotliUpstream()
    loop_thread.run(other.start())
    try:
        proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
        made = httpx.post(f"{proxy.base_url}/conversations", params=ON_OTHER, json={},
                          headers={"Authorization": f"Bearer {API_KEY}",
                                   "Accept-Encoding": "gzip, br"})
        assert made.status_code == 200
        [(_, made_id)] = list(other.conversations)
        assert make_client(proxy.base_url).conversations.retrieve(made_id).id == made_id
        assert main.requests == []
        # Asked for plain, as the proxy asks for the answers it reads: the client gets it so.
        assert [r.headers["accept-encoding"] for r in other.requests][0] == "identity"
        assert made.json()["id"] == made_id
    finally:
        loop_thread.run(other.stop())


def test_a_conversation_made_elsewhere_goes_by_the_model(
        pair: Any, make_client: Callable[..., openai.OpenAI]) -> None:
    main, other, proxy = pair
    with pytest.raises(openai.NotFoundError):
        make_client(proxy.base_url).responses.create(model="claude-sonnet", input="Hi.",
                                                     conversation="conv_made_elsewhere")
    assert [r.path for r in other.requests] == ["/v1/responses"]
    assert main.requests == []
    assert "routed_by" not in proxy.requests()[-1]


@pytest.mark.parametrize("stream", [False, True])
def test_previous_response_id_goes_to_the_upstream_that_made_it(
        pair: Any, make_client: Callable[..., openai.OpenAI], stream: bool) -> None:
    # The client switches model mid-chain: the chain is kept where its first turn ran.
    main, other, proxy = pair
    client = make_client(proxy.base_url)
    if stream:
        with client.responses.stream(model="claude-sonnet", input="Say hello.") as events:
            first = events.get_final_response()
    else:
        first = client.responses.create(model="claude-sonnet", input="Say hello.")
    origins = proxy.app[SERVICES].origins
    deadline = time.monotonic() + 5  # the client may have the answer before the proxy read it
    while first.id not in origins:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    second = client.responses.create(model="gpt-4o", input="Go on.",
                                     previous_response_id=first.id)
    assert second.previous_response_id == first.id
    assert [r.path for r in other.requests] == ["/v1/responses", "/v1/responses"]
    assert main.requests == []
    line = proxy.requests()[-1]
    assert line["routed_by"] == "id" and line["upstream"] == "other"
    assert line["previous_response_id"] is True and line["model"] == "gpt-4o"


@pytest.mark.parametrize(("tail", "made_id", "whole"), [
    ("conversations/conv_1", "conv_1", True),
    ("conversations/conv_1/items", "conv_1", False),
    ("conversations/conv_1/items/msg_2", "conv_1", False),
    ("conversations", None, False),
    ("responses/resp_1", "resp_1", True),
    ("responses/resp_1/cancel", "resp_1", False),
    ("chat/completions/chatcmpl-1", "chatcmpl-1", True),
    ("chat/completions/chatcmpl-1/messages", "chatcmpl-1", False),
])
def test_a_path_names_its_id_and_whether_it_is_the_object_itself(
        tail: str, made_id: str | None, whole: bool) -> None:
    assert scoped_id(tail) == made_id
    assert (made_id is not None and names_the_object(tail)) is whole


@pytest.mark.parametrize(("doc", "held"), [
    ({"previous_response_id": "resp_1"}, "resp_1"),
    ({"conversation": "conv_1"}, "conv_1"),
    ({"conversation": {"id": "conv_1"}}, "conv_1"),
    ({"conversation": {"id": 7}}, None),
    ({"conversation": ""}, None),
    ({"previous_response_id": None, "conversation": None}, None),
])
def test_the_id_a_responses_request_continues(doc: dict[str, Any], held: str | None) -> None:
    assert continued_id(doc) == held


def test_a_conversation_in_use_is_kept_past_the_stores_30_days(
        make_fake: Callable[..., FakeUpstream], loop_thread: LoopThread, tmp_path: Any,
        make_client: Callable[..., openai.OpenAI]) -> None:
    # OpenAI keeps conversations without the 30 days a response gets; the store's rows age out
    # 30 days after they were written.
    main, other = make_fake(), make_fake()
    settings = proxy_settings(main.url, str(tmp_path / "state"),
                              upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    day, now = 86_400.0, [time.time() - 45 * 86_400.0]
    first = loop_thread.run(start_proxy(settings))
    try:
        services = first.app[SERVICES]
        services.configured = replace(services.configured, origins=Origins(
            settings.upstreams, services.pipeline.store, lambda: now[0]))
        client = make_client(first.base_url)
        made = client.conversations.create(extra_query=ON_OTHER)
        now[0] += 29 * day
        client.responses.create(model="gpt-4o", input="Hi.", conversation=made.id)
        now[0] += 11 * day  # 40 days after its making, 11 after its last use
        client.conversations.create(extra_query=ON_OTHER)  # a write: rows over 30 days go
    finally:
        loop_thread.run(stop_proxy(first))
    second = loop_thread.run(start_proxy(settings))
    try:
        assert make_client(second.base_url).conversations.retrieve(made.id).id == made.id
    finally:
        loop_thread.run(stop_proxy(second))
    assert main.requests == []
