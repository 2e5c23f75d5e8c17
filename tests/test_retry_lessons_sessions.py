"""Multi-turn sessions whose every turn used to pay a rejected round trip (SPEC §7.4): the
client keeps a habit the upstream refuses (it drops DeepSeek's `reasoning_content`, drops or
forges Gemini's `thought_signature`, echoes `reasoning_content` to a strict server, keeps a
foreign `encrypted_content` blob). The first refusal buys the usual retry; once that retry
passed, the thread's later requests for that model go up fixed at once, and say so on the
request line (`retry_lesson`)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.server.services import SERVICES
from proxy.testing.replies import Reply
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY
from tests.test_retries import forged_exchange
from tests.tool_loop_client import Echo, ToolLoopClient

TURNS = 5


def _dropped_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if k != "reasoning_content"}


def _dropped_signatures(message: dict[str, Any]) -> dict[str, Any]:
    calls = [{k: v for k, v in c.items() if k != "extra_content"} for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _forged_signatures(message: dict[str, Any]) -> dict[str, Any]:
    calls = [{**c, "extra_content": {"google": {"thought_signature": "forged"}}}
             for c in message["tool_calls"]]
    return {**message, "tool_calls": calls}


def _added_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    kept = {k: message[k] for k in ("role", "content", "tool_calls")}
    return {**kept, "reasoning_content": "I keep what a DeepSeek client keeps."}


# dialect, the client's habit, the retry's reason
CHAT_HABITS = {
    "placeholders": ("deepseek-thinking", _dropped_reasoning,
                     "reasoning_content required in the tool loop"),
    "signature_stand_ins": ("gemini", _dropped_signatures, "Gemini thought signature missing"),
    "stand_in": ("gemini", _forged_signatures, "Gemini thought signature rejected"),
    "drop_plain_reasoning": ("openai-strict", _added_reasoning, "reasoning fields not accepted"),
}


def _main(fake: Any, since: int) -> list[Any]:
    return [r for r in fake.requests[since:] if not is_summarizer_request(r.json)]


def chat_session(proxy: Any, fake: Any, echo: Echo, *, turns: int = TURNS, **who: Any) -> list[int]:
    """A tool loop of `turns` requests; the upstream calls each one made."""
    client = ToolLoopClient(proxy, fake, echo, **who)
    return [client.turn()[1] for _ in range(turns)]


@pytest.mark.parametrize("habit", list(CHAT_HABITS))
def test_a_fix_that_passed_is_sent_at_once_on_the_threads_later_turns(
        make_fake, make_proxy, habit: str) -> None:
    dialect, echo, reason = CHAT_HABITS[habit]
    fake = make_fake(dialect=dialect)
    proxy = make_proxy(fake)

    counts = chat_session(proxy, fake, echo)

    # The first request has nothing to refuse; the second learns; the rest go fixed at once.
    assert counts == [1, 2] + [1] * (TURNS - 2)
    lines = proxy.requests()
    assert all(line["status"] == 200 for line in lines)
    assert [line.get("retried") for line in lines] == [None, reason] + [None] * (TURNS - 2)
    assert [line.get("retry_lesson") for line in lines] == [None, None] + [reason] * (TURNS - 2)


def _responses_turn(client: httpx.Client, proxy: Any, items: list[Any]) -> httpx.Response:
    return client.post(f"{proxy.base_url}/responses", headers={
        "authorization": f"Bearer {API_KEY}", "x-thread-id": "enc"}, json={
        "model": "gpt-4o", "input": items, "store": False,
        "include": ["reasoning.encrypted_content"]})


def test_a_foreign_encrypted_blob_is_stripped_at_once_once_its_strip_passed(
        make_fake, make_proxy) -> None:
    fake = make_fake()
    proxy = make_proxy(fake)
    items: list[Any] = forged_exchange()
    counts = []
    with httpx.Client(timeout=30) as client:
        for step in range(TURNS):
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": f"go on {step}"}]})
            fake.script(Reply.text(f"step {step}"))
            before = len(fake.requests)
            answer = _responses_turn(client, proxy, items)
            assert answer.status_code == 200, answer.text
            counts.append(len(_main(fake, before)))
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"step {step}", "annotations": []}]})
    assert counts == [2] + [1] * (TURNS - 1)
    lines = proxy.requests()
    assert [line.get("retry_lesson") for line in lines[1:]] == \
        ["encrypted reasoning rejected"] * (TURNS - 1)
    sent = _main(fake, 0)[-1].json["input"]
    assert not any(i.get("type") == "reasoning" for i in sent)


def test_a_fix_that_passed_in_a_stream_is_learned_too(make_fake, make_proxy) -> None:
    fake = make_fake(dialect="deepseek-thinking")
    proxy = make_proxy(fake)
    client = ToolLoopClient(proxy, fake, _dropped_reasoning)
    assert [client.turn(stream=True) for _ in range(4)] == [(200, 1), (200, 2), (200, 1), (200, 1)]
    assert [line.get("retry_lesson") is not None for line in proxy.requests()] == \
        [False, False, True, True]


def test_a_strip_runs_out_so_a_client_that_dropped_the_blob_sends_its_own_again(
        make_fake, make_proxy) -> None:
    """A strip also takes the upstream's own, valid blobs out: once the client no longer sends
    the refused one, its requests must go as sent again, not stripped for the thread's life."""
    fake = make_fake()
    proxy = make_proxy(fake)
    proxy.app[SERVICES].pipeline.lessons._uses = 2  # noqa: SLF001 - a short life, to see its end
    items: list[Any] = forged_exchange()
    foreign = items[1]
    counts = []
    with httpx.Client(timeout=30) as client:
        for step in range(7):
            if step == 4:
                items.remove(foreign)  # the client's own compaction dropped it
            items.append({"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": f"go on {step}"}]})
            fake.script(Reply.text(f"step {step}"))
            before = len(fake.requests)
            assert _responses_turn(client, proxy, items).status_code == 200
            counts.append(len(_main(fake, before)))
            items.append({"type": "message", "role": "assistant", "content": [
                {"type": "output_text", "text": f"step {step}", "annotations": []}]})
    # Learned, used twice, gone: refused and learned again; used twice; then sent as it is.
    assert counts == [2, 1, 1, 2, 1, 1, 1]
    assert [line.get("retry_lesson") is not None for line in proxy.requests()] == \
        [False, True, True, False, True, True, False]
