"""The synthetic coding-agent session: exact size, deterministic, valid, realistic."""

from __future__ import annotations

import json
import statistics

import pytest

from proxy.testing.reference_tokens import chat_message_tokens, responses_item_tokens
from proxy.testing.rules import check_chat, check_responses
from proxy.testing.sessions import coding_session
from tests.strategies import request_points


@pytest.mark.parametrize("api", ["chat", "responses"])
@pytest.mark.parametrize("n", [1, 2, 3, 17, 300])
def test_session_has_exactly_n_valid_elements_ending_at_a_request(api: str, n: int) -> None:
    session = coding_session(n, seed=n, api=api)
    assert len(session) == n
    found = check_chat({"messages": session}) if api == "chat" else check_responses({"input": session})
    assert found is None
    assert n in request_points(session) or n == 1


def test_session_is_deterministic_for_its_seed() -> None:
    assert coding_session(200, seed=7) == coding_session(200, seed=7)
    assert coding_session(200, seed=7) != coding_session(200, seed=8)


def test_session_looks_like_a_coding_agent_at_about_375_tokens_a_message() -> None:
    averages = [statistics.mean(chat_message_tokens(m) for m in coding_session(300, seed=s))
                for s in range(3)]
    averages += [statistics.mean(map(responses_item_tokens, coding_session(300, seed=s, api="responses")))
                 for s in range(3)]
    assert 300 <= statistics.mean(averages) <= 450
    session = coding_session(300, seed=1)
    calls = [c for m in session for c in m.get("tool_calls") or []]
    names = {c["function"]["name"] for c in calls}
    assert {"read_file", "grep", "glob", "edit_file", "bash", "todo_write"} <= names
    assert any(len(m.get("tool_calls") or []) > 1 for m in session)
    assert any(len(c["function"]["arguments"]) > 2000 for c in calls)
    assert any("修复" in str(m.get("content")) or "请" in str(m.get("content")) for m in session)
    reads = [json.loads(c["function"]["arguments"]) for c in calls if c["function"]["name"] == "read_file"]
    assert any("start_line" in r for r in reads)
