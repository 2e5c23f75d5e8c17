"""Two tenants may use the same thread id: every event that names a thread names its tenant
too, the digest the request line has (README, Logs), so an operator can tell them apart."""

from __future__ import annotations

from typing import Any

import httpx

from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.sessions import coding_session
from tests.conftest import API_KEY
from tests.test_retries import forged_exchange
from tests.test_store_failures import FullDiskOnCommit, _post


def _names_the_requests_thread(event: dict[str, Any], line: dict[str, Any]) -> None:
    assert line["tenant"] not in (None, "anonymous")
    assert (event["thread"], event.get("tenant")) == (line["thread"], line["tenant"]), event


def test_upstream_retry_names_the_tenant(make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    fake.script(Reply.text("recovered"))
    items = [*forged_exchange(),
             {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]
    answer = httpx.post(f"{proxy.base_url}/responses", timeout=30,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "retry"},
                        json={"model": "gpt-4o", "input": items, "store": False,
                              "include": ["reasoning.encrypted_content"]})
    assert answer.status_code == 200, answer.text
    [retry] = proxy.logs.events("upstream_retry")
    _names_the_requests_thread(retry, proxy.requests()[-1])


def test_usage_not_recorded_names_the_tenant(proxy, fake, monkeypatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("store went away")

    monkeypatch.setattr(proxy.app[SERVICES].pipeline, "finish_body", broken)
    fake.script(Reply.text("Still here."))
    answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                        headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "usage"},
                        json={"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]})
    assert answer.status_code == 200
    [event] = proxy.logs.events("usage_not_recorded")
    _names_the_requests_thread(event, proxy.requests()[-1])


def test_microcompact_not_recorded_names_the_tenant(make_fake, make_proxy, loop_thread) -> None:
    fake = make_fake()
    proxy = make_proxy(fake, compaction={"microcompact": {"idle_seconds": 0, "keep_recent": 1}})
    store = proxy.app[SERVICES].pipeline.store
    messages = coding_session(60, seed=3)
    assert _post(proxy, messages[:40]).status_code == 200
    loop_thread.run(store.flush())
    db = store.store._require_db()
    db.conn = FullDiskOnCommit(db.conn)  # type: ignore[assignment]
    assert _post(proxy, messages[:41]).status_code == 200
    [event] = proxy.logs.events("microcompact_not_recorded")
    _names_the_requests_thread(event, proxy.requests()[-1])
