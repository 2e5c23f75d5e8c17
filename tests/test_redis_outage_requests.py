"""Requests through a proxy whose Redis state server stops and comes back (`state.backend: redis`).

A request whose thread's state cannot be read gets a 503 `state_unavailable` in OpenAI's error
shape, naming no server and no password, and nothing reaches the upstream: forwarded without
its thread's checkpoint, the request would be the client's whole history, not the projection the
thread's turns have had. Once the server is back the proxy serves again, without a restart.
"""

from __future__ import annotations

import time

import openai
import pytest
import redis as sync_redis

from tests.conftest import API_KEY
from tests.redis_server import RedisServer
# `own_server`: a Redis server of this test alone, with a password, which the test stops.
from tests.test_store_redis_outage import PASSWORD, own_server, restarted  # noqa: F401


def ask(client: openai.OpenAI, thread: str) -> openai.types.chat.ChatCompletion:
    return client.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "hello"}],
        extra_headers={"x-thread-id": thread})


def test_a_request_while_redis_is_down_is_a_503_and_the_next_one_after_it_is_served(
        make_proxy, fake, own_server: RedisServer, redis_prefix: str) -> None:
    url = f"redis://:{PASSWORD}@127.0.0.1:{own_server.port}/0"
    proxy = make_proxy(fake, state={"backend": "redis", "redis": {
        "url": url, "prefix": redis_prefix, "timeout_s": 1}})
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    try:
        assert ask(client, "outage").choices[0].message.content
        sent = len(fake.requests)
        own_server.process.terminate()
        own_server.process.wait(10)
        with pytest.raises(openai.APIStatusError) as refused:
            ask(client, "outage")
        assert refused.value.status_code == 503
        error = refused.value.response.json()["error"]
        assert error["code"] == "state_unavailable" and error["type"] == "server_error"
        assert set(error) == {"message", "type", "param", "code"}
        assert PASSWORD not in refused.value.response.text
        assert str(own_server.port) not in refused.value.response.text
        assert len(fake.requests) == sent  # nothing went upstream
        [line] = [r for r in proxy.requests() if r.get("status") == 503]
        assert line["error"] == "state_unavailable"
        logged = proxy.logs.events("state_unavailable")
        assert logged and PASSWORD not in str(logged)
        back = restarted(own_server)
        try:
            assert ask(client, "outage").choices[0].message.content
        finally:
            back.terminate()
            back.wait(10)
    finally:
        client.close()


def test_a_request_while_redis_is_paused_past_the_timeout_is_a_503_then_served(
        make_proxy, fake, redis_server: RedisServer, redis_prefix: str) -> None:
    proxy = make_proxy(fake, state={"backend": "redis", "redis": {
        "url": redis_server.url, "prefix": redis_prefix, "timeout_s": 1}})
    client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0, timeout=20)
    admin = sync_redis.Redis.from_url(redis_server.url)
    try:
        assert ask(client, "paused").choices[0].message.content
        sent = len(fake.requests)
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        paused_at = time.monotonic()
        with pytest.raises(openai.APIStatusError) as refused:
            ask(client, "paused")
        assert refused.value.status_code == 503
        assert refused.value.response.json()["error"]["code"] == "state_unavailable"
        assert time.monotonic() - paused_at < 2.9  # the timeout, not the pause, ended it
        assert len(fake.requests) == sent
        time.sleep(max(0.0, 3.2 - (time.monotonic() - paused_at)))
        assert ask(client, "paused").choices[0].message.content
        assert len(fake.requests) == sent + 1
    finally:
        admin.close()
        client.close()
