"""`OpenAI-Organization` and `OpenAI-Project` scope the credential they come with (the SDK sends
them when `organization` / `project` or OPENAI_ORG_ID / OPENAI_PROJECT_ID are set). When the
proxy puts its upstream's key in place of the client's, they go with the client's key: sent
beside the upstream's, they name an organization or project that key may not belong to, and
OpenAI refuses every request (401 `mismatched_organization`). A summary the proxy asks for with
the client's own key carries its scope, as the client's request did."""

from __future__ import annotations

import openai
import pytest

from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from tests.compaction_session import LIMIT, MODEL, planted_session, up_to_last_user
from tests.conftest import API_KEY

SCOPE = {"openai-organization": "org-client", "openai-project": "proj_client"}


def _client(proxy, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.base_url, api_key=key, organization="org-client",
                         project="proj_client", max_retries=0, timeout=20)


@pytest.mark.parametrize("call", ["responses", "chat", "models"])
def test_the_clients_scope_headers_leave_with_its_key(make_fake, make_proxy, call: str) -> None:
    fake = make_fake(api_key="sk-upstream-secret-key")
    proxy = make_proxy(fake, upstreams={"fake": {"api_key": "sk-upstream-secret-key"}})
    with _client(proxy, "sk-client-key-1234") as client:
        if call == "responses":
            client.responses.create(model="gpt-5", input=[{"role": "user", "content": "Hi"}])
        elif call == "chat":
            client.chat.completions.create(model="gpt-4o",
                                           messages=[{"role": "user", "content": "Hi"}])
        else:
            client.models.list()
    sent = fake.last().headers
    assert sent["authorization"] == "Bearer sk-upstream-secret-key"
    assert not SCOPE.keys() & {name.lower() for name in sent}


def test_the_clients_scope_headers_go_with_its_own_key(fake, proxy) -> None:
    with _client(proxy, API_KEY) as client:
        client.responses.create(model="gpt-5", input=[{"role": "user", "content": "Hi"}])
    sent = fake.last().headers
    assert sent["authorization"] == f"Bearer {API_KEY}"
    assert {name: sent[name] for name in SCOPE} == SCOPE


def test_a_summary_made_with_the_clients_key_carries_its_scope(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    over = up_to_last_user(messages)
    fake.script(Reply.text("Done."))
    with _client(proxy, API_KEY) as client:
        client.chat.completions.create(model=MODEL, messages=over,
                                       extra_headers={"x-thread-id": "scoped"})
    assert summarizer.calls >= 1
    for request in fake.requests:
        assert request.headers["authorization"] == f"Bearer {API_KEY}"
        assert {name: request.headers.get(name) for name in SCOPE} == SCOPE, (
            "summary" if is_summarizer_request(request.json) else "turn")
