"""A client's idempotency key goes upstream with the body it was made for.

The proxy's internal retry (after an overflow, or rejected private state) sends another body
than the first attempt; so does a request the proxy compacted, or fixed with its thread's retry
lesson, compared with the client's own. An upstream that honours idempotency keys (Stripe's
rules, the IETF `Idempotency-Key` draft) answers a key seen before with its first answer, and
refuses a key reused with another body. Tested against such an upstream: the fake behind a
key-enforcing layer.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import openai
import pytest
from aiohttp import web
from multidict import CIMultiDict

from proxy.server.headers import bind_idempotency_keys, bound_idempotency_key
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.harness import LoopThread, RunningProxy

CALL = {"id": "call_abc", "type": "function",
        "function": {"name": "read_file", "arguments": '{"path":"a.py"}'}}
# Cerebras refuses `reasoning_content` on an assistant message: one retry without it.
THINKING_LOOP = [{"role": "user", "content": "read a.py"},
                 {"role": "assistant", "content": None, "reasoning_content": "I should read it.",
                  "tool_calls": [CALL]},
                 {"role": "tool", "tool_call_id": "call_abc", "content": "print(1)"}]


class KeyedUpstream(FakeUpstream):
    """The fake behind idempotency keys: the first answer to a key is kept with the body it
    came with; the same key and body again gets that answer, without running again; the same
    key with another body is refused (the draft's 422; Stripe says 400 `idempotency_error`)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.answered: dict[str, tuple[bytes, int, bytes]] = {}
        self.replayed: list[str] = []

    def app(self) -> web.Application:
        app = super().app()
        app.middlewares.insert(0, self._honour_keys)  # outside the fake: a replay runs nothing
        return app

    @web.middleware
    async def _honour_keys(self, request: web.Request, handler: Any) -> web.StreamResponse:
        key = request.headers.get("Idempotency-Key")
        if key is None:
            return await handler(request)
        body = await request.read()
        seen = self.answered.get(key)
        if seen is not None:
            if seen[0] != body:
                return web.json_response({"error": {
                    "message": f"Keys for idempotent requests can only be used with the same "
                               f"parameters they were first used with: {key}.",
                    "type": "invalid_request_error", "param": None,
                    "code": "idempotency_key_reused"}}, status=422)
            self.replayed.append(key)
            return web.Response(status=seen[1], body=seen[2], content_type="application/json")
        answer = await handler(request)
        assert isinstance(answer, web.Response) and isinstance(answer.body, bytes)
        self.answered[key] = (body, answer.status, answer.body)
        return answer


@pytest.fixture
def make_keyed(loop_thread: LoopThread) -> Any:
    started: list[KeyedUpstream] = []

    def make(**options: Any) -> KeyedUpstream:
        upstream = KeyedUpstream(**options)
        loop_thread.run(upstream.start())
        started.append(upstream)
        return upstream

    yield make
    for upstream in started:
        loop_thread.run(upstream.stop())


def _keys(fake: FakeUpstream) -> list[str | None]:
    """The idempotency key of each main-model request the fake ran."""
    return [r.headers.get("idempotency-key") for r in fake.requests
            if r.path.endswith("/chat/completions") and not is_summarizer_request(r.json)]


def _ask(client: openai.OpenAI, messages: list[dict[str, Any]], model: str, key: str) -> Any:
    return client.chat.completions.create(
        model=model, messages=messages,
        extra_headers={"Idempotency-Key": key, "x-thread-id": "keyed"})


def test_a_retry_without_rejected_reasoning_gets_a_key_of_its_own(
        make_keyed: Callable[..., KeyedUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    fake = make_keyed(dialect="cerebras")
    client = make_client(make_proxy(fake).base_url)
    answer = _ask(client, THINKING_LOOP, "gpt-4o", "order-42")
    assert answer.choices[0].message.content
    first, retry = fake.requests
    assert "reasoning_content" in first.json["messages"][1]
    assert "reasoning_content" not in retry.json["messages"][1]
    assert _keys(fake) == ["order-42", bound_idempotency_key("order-42", retry.body)]
    assert int(retry.headers["content-length"]) == len(retry.body)
    # The SDK's own count of its retries: the proxy's retry is none of them.
    assert retry.headers["x-stainless-retry-count"] == first.headers["x-stainless-retry-count"]

    # The client sends it again with its key (its answer was lost): the thread's retry lesson
    # sends the retry's very body at once, under the retry's key: the upstream's first answer.
    again = _ask(client, THINKING_LOOP, "gpt-4o", "order-42")
    assert again.id == answer.id and len(fake.requests) == 2
    assert fake.replayed == [bound_idempotency_key("order-42", retry.body)]


def test_the_retry_after_an_overflow_gets_a_key_of_its_own(
        make_keyed: Callable[..., KeyedUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    fake = make_keyed(limits={"small-*": 9_000})
    FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": 16_000}},
                       compaction={"collapse": {"enabled": False}, "truncate": {"enabled": False}})
    session = coding_session(60, seed=8)
    cut = next(k for k, m in enumerate(session)  # over the upstream's limit, under the trigger
               if m["role"] == "user" and chat_prompt_tokens({"messages": session[:k + 1]}) > 9_500)
    messages = session[:cut + 1]
    client = make_client(proxy.base_url)
    answer = _ask(client, messages, "small-coder", "order-7")
    assert answer.choices[0].message.content
    assert proxy.requests()[-1]["retried"] == "context_overflow"
    main = [r for r in fake.requests if not is_summarizer_request(r.json)]
    assert len(main) == 2
    assert _keys(fake) == ["order-7", bound_idempotency_key("order-7", main[1].body)]

    # Sent again: rebuilt from the checkpoint the retry made, the same body under the same key.
    again = _ask(client, messages, "small-coder", "order-7")
    assert again.id == answer.id
    assert len([r for r in fake.requests if not is_summarizer_request(r.json)]) == 2


def test_a_key_goes_as_sent_with_the_clients_own_body(
        make_keyed: Callable[..., KeyedUpstream], make_proxy: Callable[..., RunningProxy],
        make_client: Callable[..., openai.OpenAI]) -> None:
    fake = make_keyed()
    client = make_client(make_proxy(fake).base_url)
    messages = [{"role": "user", "content": "Say hello."}]
    first = _ask(client, messages, "gpt-4o", '"8e03978e-40d5-43e8-bc93-6894a57f9324"')
    assert _ask(client, messages, "gpt-4o", '"8e03978e-40d5-43e8-bc93-6894a57f9324"').id == first.id
    assert _keys(fake) == ['"8e03978e-40d5-43e8-bc93-6894a57f9324"']


def test_a_bound_key_is_stable_distinct_and_keeps_the_keys_form() -> None:
    key = bound_idempotency_key("order-42", b'{"a":1}')
    assert key == bound_idempotency_key("order-42", b'{"a":1}')
    assert uuid.UUID(key).version == 5
    assert len({key, bound_idempotency_key("order-42", b'{"a":2}'),
                bound_idempotency_key("order-43", b'{"a":1}')}) == 3
    quoted = bound_idempotency_key('"order-42"', b'{"a":1}')  # a Structured Field string
    assert quoted.startswith('"') and quoted.endswith('"') and uuid.UUID(quoted[1:-1])


def test_both_spellings_of_the_key_are_bound_and_other_headers_kept() -> None:
    headers = CIMultiDict({"x-idempotency-key": "a", "Idempotency-Key": "b", "X-Other": "c"})
    bind_idempotency_keys(headers, b"{}")
    assert headers["X-Idempotency-Key"] == bound_idempotency_key("a", b"{}")
    assert headers["idempotency-key"] == bound_idempotency_key("b", b"{}")
    assert headers["x-other"] == "c"
