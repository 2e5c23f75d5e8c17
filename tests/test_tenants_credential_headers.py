"""`threads.credential_headers`: a client that authenticates with a gateway's own header alone
(Portkey's `x-portkey-api-key`, say) is a tenant of its own, and a summary made for it carries
that header; without the setting all such clients were one tenant (`anonymous`), and every
summary went up without their key."""

from __future__ import annotations

from typing import Any

import httpx
import orjson
import pytest

from proxy.settings import ConfigError, load_settings
from proxy.testing.fake_upstream import Recorded
from proxy.testing.replies import Reply
from proxy.testing.summarizer import is_summarizer_request
from proxy.threads import ANONYMOUS, tenant_digest
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.test_compaction_failures import MODELS, NO_CHEAP, _prefix

GATEWAY = "x-portkey-api-key"
THREADS = {"credential_headers": ["authorization", "X-Portkey-Api-Key"]}
KEYS = ("pk-alpha-5d1e0c7a9b3f", "pk-bravo-8e2f1d6c0a4b")


def _post(proxy, messages: list[dict[str, Any]], thread: str, key: str) -> httpx.Response:
    body = orjson.dumps({"model": MODEL, "messages": messages})
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=60,
                      headers={"content-type": "application/json", "x-thread-id": thread,
                               GATEWAY: key})


def _summary_requests(fake) -> list[Recorded]:
    return [r for r in fake.requests if is_summarizer_request(r.json)]


def test_the_first_configured_header_present_names_the_tenant() -> None:
    names = ("authorization", GATEWAY)
    alone = tenant_digest({GATEWAY: KEYS[0]}, names)
    assert alone not in (ANONYMOUS, tenant_digest({GATEWAY: KEYS[1]}, names))
    assert KEYS[0] not in alone
    both = {"authorization": f"Bearer {KEYS[1]}", GATEWAY: KEYS[0]}
    assert tenant_digest(both, names) == tenant_digest({"authorization": f"Bearer {KEYS[1]}"})
    assert tenant_digest({GATEWAY: KEYS[0]}) == ANONYMOUS  # the default names leave it out


def test_names_are_read_in_lower_case_once_each(tmp_path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams: {up: {base_url: 'http://127.0.0.1:1/v1'}}\n"
                    "threads: {credential_headers: [X-Portkey-Api-Key, authorization, "
                    "x-portkey-api-key]}\n")
    assert load_settings(path).threads.credential_headers == (GATEWAY, "authorization")


@pytest.mark.parametrize(("value", "problem"), [
    ("[]", "expected at least one header name"),
    ("['x portkey']", "is not an HTTP header name"),
    ("x-api-key", "expected a list of non-empty strings"),
])
def test_a_wrong_list_is_refused_by_name(tmp_path, value: str, problem: str) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text("upstreams: {up: {base_url: 'http://127.0.0.1:1/v1'}}\n"
                    f"threads: {{credential_headers: {value}}}\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(path)
    assert "threads.credential_headers" in str(refused.value) and problem in str(refused.value)


def test_gateway_keys_are_tenants_and_their_summaries_carry_them(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP, threads=THREADS)
    messages, _ = planted_session(200)
    over_trigger = _prefix(messages, 12_600, 14_500)  # summarized before it goes up
    for key in KEYS:  # the same thread id under two gateway keys
        fake.script(Reply.text("ok"))
        answer = _post(proxy, over_trigger, "shared-id", key)
        assert answer.status_code == 200 and answer.headers["x-compaction"] == "compacted"
    summaries = _summary_requests(fake)
    assert [r.headers.get(GATEWAY) for r in summaries] == list(KEYS)
    tenants = [line["tenant"] for line in proxy.requests()]
    names = ("authorization", GATEWAY)
    assert tenants == [tenant_digest({GATEWAY: key}, names) for key in KEYS]
    assert len(set(tenants)) == 2 and ANONYMOUS not in tenants
    assert not any(key in proxy.logs.text for key in KEYS)


def _echoing_refusal(recorded: Recorded) -> Reply | None:
    if not is_summarizer_request(recorded.json):
        return None
    presented = recorded.headers.get(GATEWAY, "")
    return Reply.error(401, {"error": {"message": f"Invalid Portkey key: {presented}",
                                       "type": "invalid_request_error"}})


def test_a_gateway_key_echoed_by_a_refusal_is_masked(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    fake.responder = _echoing_refusal
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP, threads=THREADS)
    messages, _ = planted_session(200)
    fake.script(Reply.text("ok"))
    answer = _post(proxy, _prefix(messages, 12_600, 14_500), "echo", KEYS[0])
    assert answer.status_code == 200  # degraded: the projection still fits the window
    [failed] = proxy.logs.events("compaction_failed")
    assert "Invalid Portkey key: ***" in failed["error"]
    assert KEYS[0] not in proxy.logs.text
