"""Transparency with tool traffic and reasoning (SPEC §7.3, §11), through a running proxy.

`test_server_transparency` covers bodies of plain text messages, which never reach the
cascade. Here the bodies carry tool calls, results, custom tools, images and provider-private
reasoning of every kind (chat fields, thinking parts, Gemini signatures, Responses reasoning
and compaction items): a valid, uncompacted request whose whole list lies inside the protected
window must still reach upstream as the client's bytes, on the first attempt.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import API_KEY
from tests.strategies import conversations

bodies = st.sampled_from(("chat", "responses")).flatmap(lambda api: st.tuples(
    st.just(api), conversations(api), st.sampled_from(("gpt-4o", "my-local/model"))))


@pytest.fixture
def roomy_proxy(make_proxy, fake):
    # The whole list inside the window: no cheap stage may touch anything.
    return make_proxy(fake, compaction={"fallback_keep_messages": 10_000})


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=30)
@given(drawn=bodies, spaced=st.booleans())
def test_an_uncompacted_request_with_tools_and_reasoning_goes_upstream_as_sent(
        roomy_proxy, fake, drawn: tuple[str, list, str], spaced: bool) -> None:
    api, elements, model = drawn
    body: dict[str, Any] = {"model": model, ("messages" if api == "chat" else "input"): elements}
    sent = json.dumps(body, ensure_ascii=spaced, separators=(", ", ": ") if spaced else (",", ":")).encode()
    before = len(fake.requests)
    path = "chat/completions" if api == "chat" else "responses"
    httpx.post(f"{roomy_proxy.base_url}/{path}", content=sent, timeout=20,
               headers={"content-type": "application/json", "authorization": f"Bearer {API_KEY}",
                        "x-thread-id": f"transparency-{uuid.uuid4().hex}"})
    first = fake.requests[before]  # a rejection may be retried; the first attempt is as sent
    assert first.body == sent
