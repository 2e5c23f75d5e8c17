"""What every request asks, answered without the lookups that cannot change the answer: the
statefulness of a chat request (only a Responses request keeps state upstream), the tokens of
tools and instructions a request does not have."""

from __future__ import annotations

import orjson
import pytest

from proxy.conversation import Api
from proxy.inbound import Inbound, parse_inbound, with_entries
from proxy.tokens.encoding import tokenizer_for
from proxy.tokens.estimate import TokenEstimator


def test_a_chat_request_is_never_stateful_and_is_told_without_the_responses_lookups(
        monkeypatch: pytest.MonkeyPatch) -> None:
    body = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}],
                         "previous_response_id": "resp_1", "conversation": "conv_1"})
    chat = with_entries(parse_inbound(Api.CHAT, body))
    asked: list[Api] = []
    lookup = Inbound.upstream_state.fget
    monkeypatch.setattr(Inbound, "upstream_state",
                        property(lambda self: asked.append(self.api) or lookup(self)))
    assert chat.stateful_upstream is False and asked == []
    body = orjson.dumps({"model": "m", "input": "hi", "previous_response_id": "resp_1"})
    assert parse_inbound(Api.RESPONSES, body).stateful_upstream is True
    assert asked == [Api.RESPONSES]


def test_a_request_without_tools_or_instructions_counts_neither(
        monkeypatch: pytest.MonkeyPatch) -> None:
    estimator = TokenEstimator(tokenizer_for("gpt-4o", None))
    asked: list[str] = []
    monkeypatch.setattr(estimator, "tools_tokens", lambda tools: asked.append("tools") or 5)
    monkeypatch.setattr(estimator, "instructions_tokens",
                        lambda text: asked.append("instructions") or 7)
    bare = estimator.conservative_total([], sizes=[10])
    assert asked == []
    assert estimator.conservative_total([], "[]", "be brief", sizes=[10]) > bare
    assert asked == ["tools", "instructions"]
