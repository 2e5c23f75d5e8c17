from __future__ import annotations

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from proxy import jsonio
from proxy.compaction import postcheck
from proxy.compaction.apply import (SUMMARY_HEADER, build_event, finish, prefix_digest, project,
                                    rebuild, summary_body)
from proxy.compaction.cutoff import FULL, PARTIAL, Cutoff, choose_cutoff
from proxy.compaction.restore import Restored, collect
from proxy.compaction.summary_reply import SummaryReply
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Api, Kind, content_text, entries_from, serialize
from proxy.records import CompactionEvent
from proxy.settings import RestoreSettings
from proxy.store import jsoncodec
from tests.factories import r_call, r_compaction, r_output, r_reasoning
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, estimate,
                                           ids_of, measure, r_assistant, r_user, session,
                                           sessions, system, tool_result, user)

TH = Thresholds(trigger=10_000, limit=20_000, keep_tokens=300, keep_messages=None, profiled=True)


def compacted(elements, api=Api.CHAT, strategy=PARTIAL, th=TH, summary="THE SUMMARY"):
    entries = conv(api, elements)
    ids = ids_of(entries)
    cutoff = choose_cutoff(entries, [measure(e) for e in entries], th, strategy)
    assert cutoff is not None
    restored = collect(entries, cutoff, RestoreSettings(), count)
    done = finish(entries, ids, cutoff, summary, restored, estimate=estimate, measure=measure,
                  trigger=th.trigger, limit=th.limit, tokens_before=estimate(entries) + 100_000,
                  strategy=strategy, created_at=1700000000.0, model="m",
                  summarizer_model="s")
    assert done.verdict.ok and done.event is not None and done.projection is not None
    return entries, ids, cutoff, done


def roundtrip(event: CompactionEvent) -> CompactionEvent:
    return CompactionEvent.from_data(orjson.loads(orjson.dumps(event.to_data())))


def long_chat() -> list:
    out = [system()]
    for i in range(12):
        out += [user(f"request {i}"), assistant_calls((f"c{i}", "read_file", {"path": f"f{i}"})),
                tool_result(f"c{i}", "body " * 40), assistant(f"answer {i}")]
    return out


def test_event_records_the_checkpoint() -> None:
    entries, ids, cutoff, done = compacted(long_chat())
    event = done.event
    assert event.cutoff_index == cutoff.index and event.cutoff_message_id == ids[cutoff.index]
    assert event.prefix_digest == prefix_digest(ids, 1, cutoff.index)
    assert event.summary_message["role"] == "user"
    assert event.summary_message["content"].startswith(SUMMARY_HEADER)
    assert summary_body(event) == "THE SUMMARY"
    assert (event.strategy, event.model, event.summarizer_model, event.api) == (
        "partial", "m", "s", "chat")
    assert event.tokens_after == estimate(done.projection) < event.tokens_before
    assert event.created_at == 1700000000.0


def test_projection_is_instructions_summary_restore_tail() -> None:
    entries, ids, cutoff, done = compacted(long_chat())
    projection = done.projection
    restore_count = len(done.event.restore_messages)
    assert projection[0] is entries[0]
    assert content_text(projection[1]).startswith(SUMMARY_HEADER)
    assert all(e.kind is Kind.USER for e in projection[1:2 + restore_count])
    tail = projection[2 + restore_count:]
    assert all(a is b for a, b in zip(tail, entries[cutoff.index:], strict=True))


@given(sessions, st.integers(0, 2000), st.sampled_from([PARTIAL, FULL]))
def test_rebuild_reproduces_the_projection_byte_identically(case, keep, strategy) -> None:
    api, leading, plan = case
    elements = session(api, leading, plan)
    entries = conv(api, elements)
    th = Thresholds(10**9, 10**9, keep, None, True)
    cutoff = choose_cutoff(entries, [measure(e) for e in entries], th, strategy)
    assume(cutoff is not None)
    ids = ids_of(entries)
    restored = collect(entries, cutoff, RestoreSettings(), count)
    event = build_event(entries, ids, cutoff, "S", restored, strategy=strategy, tokens_before=1,
                        created_at=0.0, model="m", summarizer_model="m")
    expected = serialize(project(entries, cutoff.lead, cutoff.index, event))
    again = conv(api, elements)  # the next request: same raw list, parsed afresh
    rebuilt = rebuild(again, ids_of(again), roundtrip(event))
    assert rebuilt is not None and rebuilt.found_by == "id"
    assert serialize(rebuilt.projection) == expected
    grown = conv(api, [*elements, user("more") if api is Api.CHAT else r_user("more")])
    longer = rebuild(grown, ids_of(grown), roundtrip(event))
    assert longer is not None
    assert serialize(longer.projection).startswith(expected[:-1])


@given(sessions, st.integers(0, 2000), st.data())
def test_edited_summarized_message_is_not_given_the_stale_summary(case, keep, data) -> None:
    api, leading, plan = case
    elements = session(api, leading, plan)
    entries = conv(api, elements)
    th = Thresholds(10**9, 10**9, keep, None, True)
    cutoff = choose_cutoff(entries, [measure(e) for e in entries], th)
    assume(cutoff is not None)
    editable = [i for i in cutoff.summarized if entries[i].item_id is None
                and entries[i].kind in (Kind.USER, Kind.ASSISTANT, Kind.RESULT)]
    assume(editable)
    i = data.draw(st.sampled_from(editable))
    event = build_event(entries, ids_of(entries), cutoff, "S", Restored(), strategy="partial",
                        tokens_before=1, created_at=0.0, model="m", summarizer_model="m")
    edited = [dict(e) for e in elements]
    key = "output" if api is Api.RESPONSES and entries[i].kind is Kind.RESULT else "content"
    edited[i][key] = "EDITED BY THE CLIENT"
    changed = conv(api, edited)
    assert rebuild(changed, ids_of(changed), event) is None


def test_branch_that_drops_summarized_messages_gets_none() -> None:
    elements = long_chat()
    entries, ids, cutoff, done = compacted(elements)
    branched = conv(Api.CHAT, elements[:3] + elements[7:])
    assert rebuild(branched, ids_of(branched), done.event) is None


def test_rewind_to_exactly_the_cutoff_gets_none() -> None:
    elements = long_chat()
    entries, ids, cutoff, done = compacted(elements)
    rewound = conv(Api.CHAT, elements[:cutoff.index])
    assert rebuild(rewound, ids_of(rewound), done.event) is None
    lost_id = CompactionEvent(**{**done.event.to_data(), "cutoff_message_id": "gone#0"})
    assert rebuild(rewound, ids_of(rewound), lost_id) is None, "nor by the index"
    one_more = conv(Api.CHAT, elements[:cutoff.index + 1])
    assert rebuild(one_more, ids_of(one_more), done.event) is not None


@given(sessions, st.integers(0, 2000), st.sampled_from([PARTIAL, FULL]), st.booleans(),
       st.data())
def test_a_rebuilt_projection_ends_with_the_clients_last_entry(case, keep, strategy, lost_id,
                                                               data) -> None:
    api, leading, plan = case
    elements = session(api, leading, plan)
    made_on = conv(api, elements[:data.draw(st.integers(1, len(elements)), "made on")])
    th = Thresholds(10**9, 10**9, keep, None, True)
    cutoff = choose_cutoff(made_on, [measure(e) for e in made_on], th, strategy)
    assume(cutoff is not None)
    event = build_event(made_on, ids_of(made_on), cutoff, "S",
                        collect(made_on, cutoff, RestoreSettings(), count), strategy=strategy,
                        tokens_before=1, created_at=0.0, model="m", summarizer_model="m")
    if lost_id:
        event = CompactionEvent(**{**event.to_data(), "cutoff_message_id": None})
    # Any later request: a rewind (to the cut itself, or before), a retry, a longer list.
    sent = data.draw(st.just(cutoff.index) | st.integers(0, len(elements)), "sent")
    client = conv(api, elements[:sent])
    rebuilt = rebuild(client, ids_of(client), roundtrip(event))
    if rebuilt is not None:
        assert rebuilt.projection[-1].to_bytes() == client[-1].to_bytes()
        assert serialize(rebuilt.projection[rebuilt.head:]) == serialize(client[rebuilt.cut:])


def test_a_checkpoint_cut_that_parts_a_steps_calls_across_an_output_no_longer_applies() -> None:
    # An older version could cut between a step's calls with an output between them (its
    # second call's id names rs_1, which the summary took): such a checkpoint is not used.
    elements = [r_user("fix it"), r_reasoning("rs_1"), r_call("grep", "a", id="fc_1"), r_output("a"),
                r_call("grep", "b", id="fc_2"), r_output("b"), r_user("next"),
                r_assistant("Done.")]
    entries = conv(Api.RESPONSES, elements)
    ids = ids_of(entries)
    for cut, applies in ((4, False), (6, True)):
        event = build_event(entries, ids, Cutoff(cut, 0, 0, PARTIAL), "S", Restored(),
                            strategy="partial", tokens_before=1, created_at=0.0, model="m",
                            summarizer_model="m")
        assert (rebuild(entries, ids, roundtrip(event)) is not None) is applies, cut


def test_falls_back_to_index_and_checks_the_tool_result_again() -> None:
    elements = long_chat()
    entries, ids, cutoff, done = compacted(elements)
    lost_id = CompactionEvent(**{**done.event.to_data(), "cutoff_message_id": "gone#0"})
    rebuilt = rebuild(entries, ids, lost_id)
    assert rebuilt is not None and rebuilt.found_by == "index"
    on_result = next(i for i, e in enumerate(entries) if e.kind is Kind.RESULT)
    bad = CompactionEvent(**{**lost_id.to_data(), "cutoff_index": on_result,
                             "prefix_digest": prefix_digest(ids, 1, on_result)})
    assert rebuild(entries, ids, bad) is None


def test_finish_gives_up_restored_files_before_failing() -> None:
    elements = [user("go")] + [m for i in range(3) for m in (
        assistant_calls((f"c{i}", "read_file", {"path": f"f{i}"})),
        tool_result(f"c{i}", "word " * 600))] + [user("tail")]
    entries = conv(Api.CHAT, elements)
    ids = ids_of(entries)
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(per_file_tokens=1000,
                                                        total_tokens=5000), count)
    assert restored.files
    done = finish(entries, ids, cutoff, "S", restored, estimate=estimate, measure=measure,
                  trigger=400, limit=500, tokens_before=5000, strategy="partial", created_at=0.0,
                  model="m", summarizer_model="m")
    assert done.verdict.ok and done.restored.files == () and done.restored.users
    assert done.event.restore_messages == done.restored.messages


def test_latest_user_message_is_restored_whole_or_the_post_check_fails() -> None:
    latest = "requirement " * 600  # about 1800 tokens
    # The user's current request: no user message in the kept tail (were there one, the
    # post-check would leave this older message to the summary instead).
    entries = conv(Api.CHAT, [user(latest), assistant("a" * 20_000), assistant("still on it")])
    cutoff = Cutoff(index=2, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(user_messages_tokens=100), count)

    def finished(trigger: int):
        return finish(entries, ids_of(entries), cutoff, "S", restored, estimate=estimate,
                      measure=measure, trigger=trigger, limit=trigger * 4 // 3,
                      tokens_before=estimate(entries), strategy="partial", created_at=0.0,
                      model="m", summarizer_model="m")

    fits = finished(3000)
    assert fits.verdict.ok
    assert latest in content_text(fits.projection[len(fits.event.restore_messages)])
    too_long = finished(1500)
    assert not too_long.verdict.ok and too_long.event is None
    assert too_long.verdict.stage == postcheck.RESTORE
    assert "the latest one whole" in too_long.verdict.reason
    message = too_long.verdict.error().body()["error"]["message"]
    assert f"about {too_long.tokens_after:,} tokens" in message
    assert "trigger: 1,500 tokens" in message and "limit: 2,000 tokens" in message
    assert "new thread" in message


def user_with_image(api: Api, text: str) -> dict:
    if api is Api.RESPONSES:
        image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
        return {**r_user(text), "content": [*r_user(text)["content"], image]}
    return {"role": "user", "content": [{"type": "text", "text": text},
                                        {"type": "image_url", "image_url": {"url": "data:"}}]}


@pytest.mark.parametrize("text", [" fix", "  ", "\n fix it\n"])
@pytest.mark.parametrize("api", [Api.RESPONSES, Api.CHAT])
def test_a_summarized_latest_user_message_with_an_image_keeps_its_text_verbatim(api, text) -> None:
    # Found by test_properties_rebuild: the image note was appended, then the whole quote
    # stripped, so " fix" came back as "fix". The compaction item there was incidental.
    reply = assistant if api is Api.CHAT else r_assistant
    first = [r_compaction()] if api is Api.RESPONSES else []
    entries = conv(api, [*first, user_with_image(api, text), reply("a"), reply("b")])
    cutoff = Cutoff(index=len(first) + 1, lead=0, start=0, strategy=PARTIAL)
    event = build_event(entries, ids_of(entries), cutoff, "S",
                        collect(entries, cutoff, RestoreSettings(), count), strategy=PARTIAL,
                        tokens_before=1, created_at=0.0, model="m", summarizer_model="m")
    rebuilt = rebuild(entries, ids_of(entries), roundtrip(event))
    assert rebuilt is not None and rebuilt.cut == cutoff.index
    restored = rebuilt.projection[rebuilt.head - 1]
    quoted = content_text(restored)
    assert f"--- user message 1 of 1 (their current request) ---\n{text}\n[the image" in quoted
    assert restored.raw["content"][1:] == user_with_image(api, text)["content"][1:]  # it follows


def test_finish_reports_a_summary_that_does_not_shrink() -> None:
    entries = conv(Api.CHAT, [user("a"), assistant("b"), user("c")])
    cutoff = Cutoff(index=2, lead=0, start=0, strategy=PARTIAL)
    done = finish(entries, ids_of(entries), cutoff, "long " * 500, Restored(),
                  estimate=estimate, measure=measure, trigger=10_000, limit=20_000,
                  tokens_before=estimate(entries), strategy="manual", created_at=0.0,
                  model="m", summarizer_model="m")
    assert not done.verdict.ok and done.verdict.stage == postcheck.SUMMARY
    assert done.event is None


def test_api_switch_rebuilds_in_the_new_shape() -> None:
    entries, ids, cutoff, done = compacted(long_chat())
    as_responses = CompactionEvent(**{**done.event.to_data(), "api": "responses"})
    rebuilt = rebuild(entries, ids, as_responses)
    assert rebuilt is not None and rebuilt.projection[1].raw["role"] == "user"
    assert "type" not in rebuilt.projection[1].raw


# ---------------------------------------------------------------- post-check


def test_check_reply_failures() -> None:
    assert postcheck.check_reply(SummaryReply("ok", "stop")).ok
    assert postcheck.check_reply(SummaryReply("  ", "stop")).reason == "the summary is empty"
    assert "length" in postcheck.check_reply(SummaryReply("cut", "length")).reason
    assert not postcheck.check_reply(SummaryReply("", "error")).ok


def test_check_projection_names_the_stage() -> None:
    def check(**kw):
        args = dict(tokens_before=10_000, tokens_after=900, trigger=1000, limit=1333,
                    summary_tokens=100, restore_tokens=200, tail_sizes=[50, 60])
        args.update(kw)
        return postcheck.check_projection(**args)

    assert check().ok
    assert check(tokens_after=10_000).stage == "restore"
    assert check(tokens_after=10_000, restore_tokens=0).stage == "summary"
    assert check(tokens_after=2000, tail_sizes=[1500]).stage == "message"
    assert check(tokens_after=2000, summary_tokens=1200).stage == "summary"
    assert check(tokens_after=1100, restore_tokens=300).stage == "restore"
    assert check(tokens_after=1500, restore_tokens=100).stage == "projection"


def test_insufficient_error_is_the_openai_shape_and_asks_for_a_new_thread() -> None:
    verdict = postcheck.check_projection(tokens_before=5000, tokens_after=2000, trigger=1000,
                                         limit=1333,
                                         summary_tokens=10, restore_tokens=0,
                                         tail_sizes=[1500])
    error = verdict.error()
    body = error.body()["error"]
    assert error.status == 400 and body["code"] == "context_compaction_insufficient"
    assert body["type"] == "invalid_request_error" and "new thread" in body["message"]


def test_insufficient_error_says_what_was_measured_against_what() -> None:
    verdict = postcheck.check_projection(tokens_before=5000, tokens_after=3070, trigger=3000,
                                         limit=4000, summary_tokens=50, restore_tokens=822,
                                         tail_sizes=[400])
    message = verdict.error().body()["error"]["message"]
    assert "about 3,070 tokens" in message and "trigger: 3,000 tokens" in message
    assert "the model's input limit: 4,000 tokens" in message
    assert "limit of 3,000" not in message, "the trigger is not the model's limit"
    assert "restore:" in message and "new thread" in message


def test_restored_user_messages_with_a_lone_surrogate_are_carried_and_rebuilt() -> None:
    # Clients send "\ud800" escapes that orjson refuses (proxy/jsonio.py); a user message is
    # restored verbatim after its summary, so the made entries must serialize it too.
    chat = [user(f"{m['content']} \ud800") if m["role"] == "user" else m for m in long_chat()]
    entries = entries_from(Api.CHAT, chat, [jsonio.dumps(e) for e in chat])
    ids = ids_of(entries)
    cutoff = choose_cutoff(entries, [measure(e) for e in entries], TH, PARTIAL)
    assert cutoff is not None
    restored = collect(entries, cutoff, RestoreSettings(), count)
    done = finish(entries, ids, cutoff, "THE SUMMARY", restored, estimate=estimate,
                  measure=measure, trigger=TH.trigger, limit=TH.limit, tokens_before=10**6,
                  strategy=PARTIAL, created_at=1.0, model="m", summarizer_model="s")
    assert done.verdict.ok and done.event is not None and done.projection is not None
    assert any("\ud800" in m["content"] for m in done.event.restore_messages)
    stored = CompactionEvent.from_data(jsoncodec.loads(jsoncodec.dumps(done.event.to_data())))
    rebuilt = rebuild(entries, ids, stored)
    assert rebuilt is not None
    assert serialize(rebuilt.projection) == serialize(done.projection)
