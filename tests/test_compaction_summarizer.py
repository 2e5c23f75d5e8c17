from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import orjson
import pytest

from proxy.compaction.cutoff import FULL, PARTIAL, Cutoff
from proxy.compaction.prompts import Direction, clock_line
from proxy.compaction.summarizer import MAX_CONTENT_CHARS, plan_summary
from proxy.compaction.summary_reply import read_reply
from proxy.compaction.transcript import Block, chunk, render_blocks
from proxy.conversation import Api
from proxy.core.repair import CANCELLED_TEXT
from proxy.settings import SummarizerSettings
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, measure,
                                           r_assistant, r_call, r_output, r_reasoning, r_user,
                                           system, tool_result, user)

NOW = datetime(2026, 3, 4, 14, 5, tzinfo=ZoneInfo("Europe/Berlin"))
SETTINGS = SummarizerSettings(max_output_tokens=1000)
SESSION_KEYS = ("prompt_cache_key", "user", "metadata", "safety_identifier", "stream", "tools",
                "tool_choice", "stream_options")


def chat_session() -> tuple:
    secret = {"reasoning_content": "PRIVATE-THOUGHT",
              "thinking_blocks": [{"type": "thinking", "thinking": "PRIVATE-BLOCK",
                                   "signature": "SIG"}]}
    entries = conv(Api.CHAT, [
        system(), user("Refactor src/app.py; do not touch tests."),
        assistant_calls(("c1", "read_file", {"path": "src/app.py"}), **secret),
        tool_result("c1", "def main(): pass"),
        assistant_calls(("c2", "run_tests", {})),  # never answered
        tool_result("ghost", "orphan result"),
        user("Yesterday's bug is still there."), assistant("Looking."), user("latest")])
    return entries, Cutoff(index=8, lead=1, start=1, strategy=PARTIAL)


def plan_for(entries, cutoff, **kw):
    options = dict(api=Api.CHAT, model="m", now=NOW, settings=SETTINGS, window=100_000,
                   count=count, measure=measure)
    options.update(kw)
    return plan_summary(entries, cutoff, **options)


def test_request_is_plain_text_with_one_user_message_and_no_session_keys() -> None:
    entries, cutoff = chat_session()
    plan = plan_for(entries, cutoff, client_doc={"prompt_cache_key": "k", "user": "u",
                                                 "metadata": {"a": 1}, "stream": True})
    body = plan.request(0, None)
    assert set(body) == {"model", "messages", "max_tokens"}
    assert body["max_tokens"] == 1000
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert all(isinstance(m["content"], str) for m in body["messages"])
    assert not any(k in body for k in SESSION_KEYS)


def test_transcript_leaves_out_private_reasoning_and_repairs_the_prefix() -> None:
    entries, cutoff = chat_session()
    text = plan_for(entries, cutoff).request(0, None)["messages"][1]["content"]
    assert "PRIVATE" not in text and "SIG" not in text
    assert "Refactor src/app.py; do not touch tests." in text
    assert "[assistant called tool read_file (call c1) with arguments]" in text
    assert "[result of tool read_file (call c1)]\ndef main(): pass" in text
    assert f"[result of tool run_tests (call c2)]\n{CANCELLED_TEXT}" in text
    assert "orphan result" not in text
    assert "latest" not in text  # the tail is not summarized


def test_prompt_carries_clock_focus_and_relative_date_rule() -> None:
    entries, cutoff = chat_session()
    body = plan_for(entries, cutoff, focus="keep the API names").request(0, None)
    system_text, user_text = (m["content"] for m in body["messages"])
    assert "Wednesday 2026-03-04 14:05, time zone Europe/Berlin (UTC+01:00)" in user_text
    assert "keep the API names" in user_text
    assert "absolute" in system_text and "yesterday" in system_text
    assert "NOT done" in system_text and "Never describe" in system_text


def test_clock_line_needs_an_aware_time_and_names_the_zone() -> None:
    with pytest.raises(ValueError):
        clock_line(datetime(2026, 1, 1))
    fixed = datetime(2026, 1, 1, 9, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert "(UTC-05:00)" in clock_line(fixed, "America/New_York")


def test_direction_earlier_for_partial_latest_for_full() -> None:
    entries, cutoff = chat_session()
    assert plan_for(entries, cutoff).direction is Direction.EARLIER
    full = Cutoff(index=8, lead=1, start=1, strategy=FULL)
    assert plan_for(entries, full).direction is Direction.LATEST
    earlier = plan_for(entries, cutoff).request(0, None)["messages"][0]["content"]
    latest = plan_for(entries, full).request(0, None)["messages"][0]["content"]
    assert earlier != latest and "EARLIER" in earlier


def test_large_prefix_is_planned_in_rolling_chunks() -> None:
    elements = [user(f"step {i}: " + "detail " * 300) for i in range(40)] + [user("tail")]
    entries = conv(Api.CHAT, elements)
    cutoff = Cutoff(index=40, lead=0, start=0, strategy=PARTIAL,
                    previous_summary="OLD SUMMARY")
    plan = plan_for(entries, cutoff, window=8_000)
    assert plan.steps > 2
    first = plan.request(0, plan.previous_summary)["messages"][1]["content"]
    assert "<summary-so-far>\nOLD SUMMARY" in first and f"part 1 of {plan.steps}" in first
    second = plan.request(1, "SUMMARY OF PART 1")["messages"]
    assert "SUMMARY OF PART 1" in second[1]["content"]
    assert "updated summary" in second[0]["content"]
    for step in range(plan.steps):
        body = plan.request(step, "x" * 4000)
        assert sum(count(m["content"]) for m in body["messages"]) + 1000 <= 8_000
    joined = "".join(plan.chunks)
    assert all(f"step {i}:" in joined for i in range(40))


def test_chunks_fill_the_input_window_less_the_carried_summary() -> None:
    elements = [user(f"step {i}: " + "detail " * 300) for i in range(40)] + [user("tail")]
    entries = conv(Api.CHAT, elements)
    prefix = sum(measure(e) for e in entries[:40])
    settings = SummarizerSettings(max_output_tokens=4096)
    plan = plan_for(entries, Cutoff(index=40, lead=0, start=0, strategy=PARTIAL),
                    window=8_000, settings=settings)
    # The answer needs no room in an input window; only the carried summary does. Reserving
    # both left 512-token chunks here: one summarizer call per ~500 tokens of transcript.
    assert plan.steps <= prefix // 2000 + 1
    for step in range(plan.steps):
        body = plan.request(step, "x" * 4 * 4096)
        assert sum(count(m["content"]) for m in body["messages"]) <= 8_000


def test_the_summarizers_window_loses_its_output_only_from_a_total_context_window(
        tmp_path) -> None:
    from proxy.server.compactor import Compactor
    from tests.harness import proxy_settings
    settings = proxy_settings("http://127.0.0.1:9", str(tmp_path), models={
        "in-*": {"max_input_tokens": 8000}, "total-*": {"context_window": 8000},
        "both-*": {"max_input_tokens": 8000, "context_window": 10_000}},
        compaction={"summarizer": {"max_output_tokens": 3000}})
    compactor = Compactor(settings, None, None, None, None, None)  # type: ignore[arg-type]
    assert compactor._window("in-1") == 8000
    assert compactor._window("total-1") == 5000
    assert compactor._window("both-1") == 7000
    assert compactor._window("unknown") == settings.compaction.fallback_trigger_tokens


def test_one_huge_message_is_cut_in_the_middle() -> None:
    entries = conv(Api.CHAT, [user("HEAD " + "x" * 200_000 + " TAIL"), user("tail")])
    plan = plan_for(entries, Cutoff(index=1, lead=0, start=0, strategy=PARTIAL), window=8_000)
    text = plan.chunks[0]
    assert plan.steps == 1 and "HEAD" in text and "TAIL" in text
    assert "characters omitted" in text and count(text) < 8_000


def test_chunk_packs_in_order() -> None:
    blocks = [Block("a", 5), Block("b", 5), Block("c", 5)]
    assert chunk(blocks, 10) == ["a\n\nb", "c"]
    assert chunk([], 10) == [""]
    assert chunk(blocks, 10, max_chars=3) == ["a", "b", "c"]  # "a\n\nb" is 4 characters
    assert chunk(blocks, 10, max_chars=4) == ["a\n\nb", "c"]


@pytest.mark.parametrize("focus", [None, "keep the API decisions " * 200])
@pytest.mark.parametrize("previous", [None, "an earlier summary. " * 4000])
def test_no_step_passes_openais_longest_content_string_whatever_the_window(
        focus: str | None, previous: str | None) -> None:
    # A 1M-token summarizer window packs 0.9M tokens a step; a transcript of code runs to
    # some 13 characters a token: far over the 1,048,576 characters OpenAI takes in a string.
    elements = [user(f"file {i}:\n" + "    x = 1  # indent\n" * 150) for i in range(800)]
    entries = conv(Api.CHAT, [*elements, user("tail")])
    settings = SummarizerSettings(max_output_tokens=16_000)
    cutoff = Cutoff(index=800, lead=0, start=0, strategy=PARTIAL, previous_summary=previous)
    plan = plan_for(entries, cutoff, window=1_000_000, settings=settings, focus=focus)
    assert plan.steps >= 3
    longest_answer = "word " * (16_000 * 8 // 5)  # 8 characters a token, the room kept
    for step in range(plan.steps):
        carried = previous if step == 0 else longest_answer
        for message in plan.request(step, carried)["messages"]:
            assert len(message["content"]) <= MAX_CONTENT_CHARS
    joined = "".join(plan.chunks)
    assert all(f"file {i}:" in joined for i in range(800))  # nothing left out, in order


def test_one_block_over_the_longest_content_string_is_cut_to_fit() -> None:
    text = "HEAD " + "y" * 2_000_000 + " TAIL"
    chunks = chunk([Block(text, 100)], 10**9, max_chars=1000)
    assert len(chunks[0]) <= 1000 and chunks[0].startswith("HEAD") and chunks[0].endswith("TAIL")


def test_output_key_follows_the_client_and_the_api() -> None:
    entries, cutoff = chat_session()
    body = plan_for(entries, cutoff, client_doc={"max_completion_tokens": 5}).request(0, None)
    assert "max_completion_tokens" in body and "max_tokens" not in body


def test_responses_summarizer_request() -> None:
    entries = conv(Api.RESPONSES, [r_user("hello"), r_reasoning("rs_1"),
                                   r_call("c1", "read_file", {"path": "a"}),
                                   r_output("c1", "content"), r_assistant("ok"), r_user("next")])
    cutoff = Cutoff(index=5, lead=0, start=0, strategy=PARTIAL)
    body = plan_for(entries, cutoff, api=Api.RESPONSES).request(0, None)
    assert set(body) == {"model", "instructions", "input", "max_output_tokens", "store"}
    assert body["store"] is False and len(body["input"]) == 1
    assert body["input"][0]["role"] == "user"
    assert "gAAAA" not in orjson.dumps(body).decode()


def test_read_reply_chat_and_responses() -> None:
    chat = {"choices": [{"message": {"role": "assistant",
                                     "content": "<think>hmm</think>\n## Goals\nx"},
                         "finish_reason": "stop"}], "usage": {"completion_tokens": 7}}
    reply = read_reply(Api.CHAT, orjson.dumps(chat))
    assert (reply.text, reply.finish_reason, reply.output_tokens) == ("## Goals\nx", "stop", 7)
    cut = {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"},
           "output": [{"type": "reasoning", "summary": []},
                      {"type": "message", "content": [{"type": "output_text", "text": "part"}]}]}
    assert read_reply(Api.RESPONSES, cut).finish_reason == "length"
    assert read_reply(Api.CHAT, b"not json").finish_reason == "error"
    assert read_reply(Api.CHAT, {"error": {"message": "boom"}}).finish_reason == "error"


def test_render_blocks_notes_attachments() -> None:
    entries = conv(Api.CHAT, [{"role": "user", "content": [
        {"type": "text", "text": "see"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}])
    text = render_blocks(entries, range(1), count, measure)[0].text
    assert "an image was attached" in text and "AAAA" not in text
