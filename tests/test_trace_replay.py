"""The trace replay of `scripts/bench_compaction.py --traces`: a turn whose request failed must
not leave the replayed history in a state no real model would have produced, or every later turn
of a strict dialect is refused (or retried) for the replay's fault, not the proxy's."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.testing.fake_upstream import Recorded
from proxy.testing.prompt_units import PromptUnits
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request
from scripts.bench_compaction import Conversation, replay
from scripts.trace_replay import ClientMode, Sent, check_turn


def _step(n: int) -> list[dict[str, Any]]:
    call_id = f"call{n:05d}"  # nine alphanumerics: valid for Mistral too
    return [{"role": "assistant", "content": f"Step {n}: look at the file.",
             "tool_calls": [{"id": call_id, "type": "function",
                             "function": {"name": "bash", "arguments": f'{{"command": "cat f{n}"}}'}}]},
            {"role": "tool", "tool_call_id": call_id, "content": f"contents of f{n}"}]


CONVERSATION = Conversation("replay-failed-turn", [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": "Fix the bug in f1."},
    *_step(1), *_step(2), *_step(3),
    {"role": "assistant", "content": "Done."},
])


def _failing_second_main_request(fake: Any) -> None:
    """The model's server fails the second main request (a 500), once."""
    previous, seen = fake.responder, []

    def respond(recorded: Recorded) -> Reply | None:
        if not is_summarizer_request(recorded.json):
            seen.append(recorded)
            if len(seen) == 2:
                return Reply.error(500, {"error": {"message": "The server had an error.",
                                                   "type": "server_error", "param": None,
                                                   "code": None}})
        return previous(recorded) if previous is not None else None

    fake.responder = respond


@pytest.mark.parametrize("dialect", ["openrouter", "gemini", "deepseek-thinking", "kimi-thinking"])
def test_turns_after_a_failed_one_go_up_once_and_pass(make_fake: Any, make_proxy: Any,
                                                      dialect: str) -> None:
    fake = make_fake(dialect=dialect)
    FakeSummarizer.install(fake)
    _failing_second_main_request(fake)
    proxy = make_proxy(fake)
    with httpx.Client(timeout=30) as client:
        turns = replay(client, proxy.base_url, fake, CONVERSATION, ClientMode("chat", "off", "m"))
    assert [t.sent.status for t in turns] == [200, 500, 200, 200]
    # The turns after the failure: one upstream attempt each, no refusal retried by the proxy.
    assert [len(t.upstream) for t in turns[2:]] == [1, 1]


def test_the_failed_turns_stand_in_carries_what_the_dialect_issues(make_fake: Any,
                                                                   make_proxy: Any) -> None:
    fake = make_fake(dialect="openrouter")
    FakeSummarizer.install(fake)
    _failing_second_main_request(fake)
    proxy = make_proxy(fake)
    with httpx.Client(timeout=30) as client:
        turns = replay(client, proxy.base_url, fake, CONVERSATION, ClientMode("chat", "off", "m"))
    stood_in = turns[2].sent.history[4]  # the second step's call, which the client never got
    assert stood_in["tool_calls"][0]["id"] == "call00002"
    assert stood_in["content"] == "Step 2: look at the file."
    assert fake.signer.detail_valid(stood_in["reasoning_details"][0])


# ---------------------------------------------------------------- the checks on Responses input

_REASONING = {"type": "reasoning", "id": "rs_01", "summary": [], "encrypted_content": "gAAA-blob"}
_SAID = {"id": "msg_01", "type": "message", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]}
_CALL = {"id": "fc_01", "type": "function_call", "call_id": "call_1", "name": "bash",
         "arguments": '{"command": "ls"}', "status": "completed"}
_OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "a.py"}
_USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix it."}]}


def _without_id(item: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in item.items() if k != "id"}


def _problems(sent: list[dict[str, Any]], received: list[dict[str, Any]], protected: int) -> list[str]:
    return check_turn(Sent(sent, 200), {"model": "m", "input": received},
                      {"protected": protected}, "responses", 100_000, PromptUnits())


def test_a_tail_whose_reasoning_item_went_with_its_followers_ids_is_unchanged() -> None:
    """A compacted projection drops the reasoning item's blob and the server ids (`msg_…`,
    `fc_…`) of the items that needed it (SPEC §7.2, PROTOCOL.md §2.3 rule 3): visible state
    untouched, so the protected tail counts as unchanged."""
    sent = [_USER, _REASONING, _SAID, _CALL, _OUTPUT]
    received = [_USER, _without_id(_SAID), _without_id(_CALL), _OUTPUT]
    assert _problems(sent, received, 3) == []
    assert _problems(sent, received, 4) == [], "the reasoning item itself inside the tail"


def test_a_tail_whose_visible_text_changed_is_still_reported() -> None:
    sent = [_USER, _REASONING, _SAID, _CALL, _OUTPUT]
    edited = {**_without_id(_SAID), "content": [{"type": "output_text", "text": "Other.",
                                                 "annotations": []}]}
    assert _problems(sent, [_USER, edited, _without_id(_CALL), _OUTPUT], 3) == [
        "protected tail of 3 changed"]
    # An id the proxy made up is a change too: only leaving a server id out is the sanitizer's.
    assert _problems(sent, [_USER, _SAID, {**_CALL, "id": "fc_02"}, _OUTPUT], 3) == [
        "protected tail of 3 changed"]
