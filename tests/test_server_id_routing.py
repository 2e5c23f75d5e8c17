"""Requests that carry no model but name an id (a stored response, a stored chat completion)
go to the upstream that made that id; list endpoints go by the `model` of their query."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import openai
import pytest

from proxy.server.services import SERVICES
from proxy.testing.fake_upstream import FakeUpstream
from tests.conftest import API_KEY
from tests.harness import LoopThread, RunningProxy, proxy_settings, start_proxy, stop_proxy

USER = [{"role": "user", "content": "Say hello."}]
# `claude-*` goes to `other`; everything else, a model-less request too, to `fake`.
ROUTES = [{"model": "claude-*", "upstream": "other"}, {"model": "*", "upstream": "fake"}]


@pytest.fixture
def pair(make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
         ) -> tuple[FakeUpstream, FakeUpstream, RunningProxy]:
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    return main, other, proxy


@pytest.fixture
def routed(pair: Any, make_client: Callable[..., openai.OpenAI]) -> tuple[Any, Any, openai.OpenAI]:
    main, other, proxy = pair
    return main, other, make_client(proxy.base_url)


def _eventually(check: Callable[[], bool], seconds: float = 5.0) -> None:
    """`check` becomes true within `seconds` (the proxy runs on another thread)."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not within the time allowed"
        time.sleep(0.01)


def _paths(fake: FakeUpstream, method: str = "") -> list[str]:
    return [r.path for r in fake.requests if not method or r.method == method]


def test_background_response_is_fetched_cancelled_listed_and_deleted_where_it_was_made(
        routed: Any) -> None:
    main, other, client = routed
    made = client.responses.create(model="claude-sonnet", input="Say hello.", background=True)
    assert made.id in other.stored

    assert client.responses.retrieve(made.id).id == made.id
    assert client.responses.cancel(made.id).id == made.id
    items = client.responses.input_items.list(made.id)
    assert [item.type for item in items.data] == ["message"]
    client.responses.delete(made.id)

    assert made.id not in other.stored
    assert _paths(other) == ["/v1/responses", f"/v1/responses/{made.id}",
                             f"/v1/responses/{made.id}/cancel",
                             f"/v1/responses/{made.id}/input_items", f"/v1/responses/{made.id}"]
    assert main.requests == []


def test_streamed_response_is_fetched_where_it_was_made(routed: Any) -> None:
    main, other, client = routed
    with client.responses.stream(model="claude-sonnet", input="Say hello.") as stream:
        made = stream.get_final_response()
    assert client.responses.retrieve(made.id).output_text == made.output_text
    assert main.requests == []


def test_stored_chat_completion_is_fetched_updated_listed_and_deleted_where_it_was_made(
        routed: Any) -> None:
    main, other, client = routed
    made = client.chat.completions.create(model="claude-sonnet", messages=USER, store=True)
    assert client.chat.completions.retrieve(made.id).id == made.id
    updated = client.chat.completions.update(made.id, metadata={"topic": "greeting"})
    assert updated.metadata == {"topic": "greeting"}
    messages = client.chat.completions.messages.list(made.id)
    assert [m.content for m in messages.data] == ["Say hello."]
    assert client.chat.completions.delete(made.id).deleted is True
    assert made.id not in other.stored_chat
    assert main.requests == []


def test_streamed_stored_chat_completion_is_fetched_where_it_was_made(routed: Any) -> None:
    main, other, client = routed
    stream = client.chat.completions.create(model="claude-sonnet", messages=USER, store=True,
                                            stream=True)
    made_id = {chunk.id for chunk in stream}.pop()
    assert client.chat.completions.retrieve(made_id).id == made_id
    assert main.requests == []


def test_stored_chat_completions_are_listed_by_the_model_of_the_query(routed: Any) -> None:
    main, other, client = routed
    made = client.chat.completions.create(model="claude-sonnet", messages=USER, store=True)
    listed = client.chat.completions.list(model="claude-sonnet")
    assert [c.id for c in listed.data] == [made.id]
    assert main.requests == []


def test_an_id_made_elsewhere_goes_by_the_route_of_no_model(routed: Any) -> None:
    main, other, client = routed
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve("resp_made_before_a_restart")
    assert _paths(main) == ["/v1/responses/resp_made_before_a_restart"]
    assert other.requests == []


def test_an_unknown_id_without_a_route_for_no_model_is_a_404_naming_the_remedy(
        make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy]) -> None:
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}},
                       routes=[{"model": "claude-*", "upstream": "other"},
                               {"model": "gpt-*", "upstream": "fake"}])
    answer = httpx.delete(f"{proxy.base_url}/chat/completions/chatcmpl-unknown",
                          headers={"Authorization": f"Bearer {API_KEY}"})
    assert answer.status_code == 404
    error = answer.json()["error"]
    assert error["code"] == "model_not_found"
    assert error["message"].startswith("No upstream is known for 'chatcmpl-unknown'")
    assert '{model: "", upstream: NAME}' in error["message"]
    assert main.requests == [] and other.requests == []


def test_only_what_the_upstream_keeps_is_remembered(
        pair: Any, make_client: Callable[..., openai.OpenAI]) -> None:
    main, other, proxy = pair
    client = make_client(proxy.base_url)
    origins = proxy.app[SERVICES].origins
    chat = client.chat.completions.create(model="claude-sonnet", messages=USER)
    unstored = client.responses.create(model="claude-sonnet", input="Hi.", store=False)
    stored = client.responses.create(model="claude-sonnet", input="Hi.")
    # The client has each answer before the proxy reads it; one connection, in order: once the
    # last is remembered, the proxy is done with the others.
    _eventually(lambda: stored.id in origins)
    assert chat.id not in origins and unstored.id not in origins


def test_the_request_line_says_the_id_routed_it_and_a_delete_forgets_it(
        pair: Any, make_client: Callable[..., openai.OpenAI]) -> None:
    main, other, proxy = pair
    client = make_client(proxy.base_url)
    made = client.responses.create(model="claude-sonnet", input="Say hello.")
    client.responses.delete(made.id)
    _eventually(lambda: proxy.requests()[-1]["method"] == "DELETE")
    assert made.id not in proxy.app[SERVICES].origins
    line = proxy.requests()[-1]
    assert line["routed_by"] == "id" and line["upstream"] == "other" and "model" not in line


def test_a_stream_the_client_left_early_is_still_found_by_its_id(
        make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), make_fake(chunk_delay=0.05)
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    body = {"model": "claude-sonnet", "input": "Say hello.", "stream": True, "background": True}
    with httpx.stream("POST", f"{proxy.base_url}/responses", json=body,
                      headers={"Authorization": f"Bearer {API_KEY}"}) as answer:
        first = next(answer.iter_lines())  # `event: response.created`, then the client leaves
    assert first == "event: response.created"
    made_id = next(iter(other.stored))
    origins = proxy.app[SERVICES].origins
    _eventually(lambda: made_id in origins)  # the proxy learns the client left at its next write
    assert make_client(proxy.base_url).responses.retrieve(made_id).id == made_id
    assert main.requests == []


def test_a_model_is_retrieved_from_the_upstream_its_route_names(
        make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), make_fake(models=("claude-sonnet",))
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    assert make_client(proxy.base_url).models.retrieve("claude-sonnet").id == "claude-sonnet"
    assert main.requests == []


def test_a_route_for_no_model_picks_where_unknown_ids_go(
        make_fake: Callable[..., FakeUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), make_fake()
    proxy = make_proxy(main, upstreams={"other": {"base_url": other.url}},
                       routes=[{"model": "", "upstream": "other"}, *ROUTES])
    with pytest.raises(openai.NotFoundError):
        make_client(proxy.base_url).chat.completions.retrieve("chatcmpl-made-elsewhere")
    assert _paths(other) == ["/v1/chat/completions/chatcmpl-made-elsewhere"]
    assert main.requests == []


@pytest.mark.parametrize("path", [
    "/v1/responses/%00", "/v1/responses/" + "r" * 5000, "/v1/responses//cancel",
    "/v1/chat/completions/%2F/messages", "/v1/chat/completions?model=%FF%FE",
    "/v1/chat/completions?model=[", "/v1/models/%5B", "/v1/models/" + "m" * 5000,
])
def test_odd_model_less_paths_are_relayed_or_refused_never_a_500(pair: Any, path: str) -> None:
    main, other, proxy = pair
    answer = httpx.get(proxy.url + path, headers={"Authorization": f"Bearer {API_KEY}"})
    assert answer.status_code in (200, 400, 404)


def test_background_responses_and_stored_completions_are_found_after_a_restart(
        make_fake: Callable[..., FakeUpstream], loop_thread: LoopThread, tmp_path: Any,
        make_client: Callable[..., openai.OpenAI]) -> None:
    main, other = make_fake(), make_fake()
    settings = proxy_settings(main.url, str(tmp_path / "state"),
                              upstreams={"other": {"base_url": other.url}}, routes=ROUTES)
    first = loop_thread.run(start_proxy(settings))
    try:
        client = make_client(first.base_url)
        background = client.responses.create(model="claude-sonnet", input="Hi.", background=True)
        completion = client.chat.completions.create(model="claude-sonnet", messages=USER,
                                                    store=True)
        plain = client.responses.create(model="claude-sonnet", input="Hi.")
    finally:
        loop_thread.run(stop_proxy(first))
    second = loop_thread.run(start_proxy(settings))
    try:
        client = make_client(second.base_url)
        assert client.responses.retrieve(background.id).id == background.id
        assert client.chat.completions.retrieve(completion.id).id == completion.id
        # A plain stored response is continued by previous_response_id (which has a model):
        # only this process remembered it, and now the route of model "" decides.
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(plain.id)
    finally:
        loop_thread.run(stop_proxy(second))
    assert _paths(main) == [f"/v1/responses/{plain.id}"]
