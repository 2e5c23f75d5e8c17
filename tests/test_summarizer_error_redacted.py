"""A summarizer's error body is quoted in `compaction_failed`, and what the client is told of
it reaches the client: an upstream that echoes the credential it refused must not put that
credential in either."""

from __future__ import annotations

from typing import Any

from proxy.testing.fake_upstream import Recorded
from proxy.testing.replies import Reply
from proxy.testing.summarizer import is_summarizer_request
from tests.compaction_session import LIMIT, planted_session
from tests.conftest import API_KEY
from tests.test_compaction_failures import MODELS, NO_CHEAP, _post, _prefix


def _echoing_refusal(recorded: Recorded) -> Reply | None:
    if not is_summarizer_request(recorded.json):
        return None
    presented = recorded.headers.get("authorization", "")
    return Reply.error(401, {"error": {"message": f"Invalid credential: {presented}",
                                       "type": "invalid_request_error"}})


def test_a_summarizer_that_echoes_the_key_does_not_get_it_logged(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    fake.responder = _echoing_refusal
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    messages, _ = planted_session(200)
    fake.script(Reply.text("ok"))
    between = _prefix(messages, 12_600, 14_500)  # over the trigger, under the limit
    assert _post(proxy, between, "echo").status_code == 200  # degraded: still fits
    over = messages[:_index_over(messages)]
    refused = _post(proxy, over, "echo-2")
    [failed, *_] = proxy.logs.events("compaction_failed")
    assert failed["stage"] == "summarize" and "HTTP 401" in failed["error"]
    assert "Invalid credential: Bearer ***" in failed["error"]
    assert API_KEY not in proxy.logs.text
    # The client's own credential refused: its 401, which quotes no part of the refusal's text.
    assert refused.status_code == 401 and API_KEY not in refused.text
    assert "Invalid credential" not in refused.text


def _index_over(messages: list[dict[str, Any]]) -> int:
    """The end of a prefix past the model's limit, ending before an assistant turn."""
    from tests.test_compaction_failures import _tokens
    for k in range(1, len(messages)):
        if messages[k]["role"] == "assistant" and _tokens(messages[:k]) > LIMIT:
            return k
    raise AssertionError("no prefix that large")
