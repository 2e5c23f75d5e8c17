"""The kept tail leaves room for the rest of the projection (SPEC §5 post-check).

After a compaction the projection holds the system prompt and tools, the summary, the restored
messages and the kept tail, and all of it must come under the trigger. A keep ratio close to
the trigger ratio (allowed: keep < trigger) used to keep a tail that left no room for the rest:
the post-check then refused the result with a 400 after the summary was paid for (replaying
the recorded traces at 16k with 0.6 / 0.5, on about a quarter of the turns). And a compaction
that no summary could bring under the trigger paid for one before it was refused.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.compaction.budgets import TailCap, restore_budgets, tail_cap
from proxy.compaction.cutoff import PARTIAL, choose_cutoff
from proxy.compaction.trigger import Thresholds
from proxy.conversation import Entry, Kind
from proxy.core.boundary import summary_cuts
from proxy.settings import RestoreSettings
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.replies import Reply
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, task_then_loop
from tests.test_compaction_cutoff import assert_valid_cut, sizes
from tests.test_compaction_failures import MODELS, NO_CHEAP, _main_requests, _post
from tests.test_compaction_support import conv, session, sessions

NEAR = {"trigger_ratio": 0.6, "keep_ratio": 0.5}


def _minimal(entries: Sequence[Entry]) -> int:
    flags = summary_cuts(entries)
    return max(i for i in range(len(entries)) if flags[i])


def _latest_user(entries: Sequence[Entry]) -> int:
    return max((i for i, e in enumerate(entries) if e.kind is Kind.USER), default=-1)


# ------------------------------------------------------------------ the arithmetic


@given(trigger=st.integers(256, 2_000_000), fixed=st.integers(0, 200_000),
       margin=st.floats(0.0, 0.5), summary=st.integers(0, 50_000),
       total=st.integers(0, 50_000), users=st.integers(0, 50_000), tail=st.data())
def test_a_tail_within_the_cap_fits_under_the_trigger_with_everything_else(
        trigger: int, fixed: int, margin: float, summary: int, total: int, users: int,
        tail: st.DataObject) -> None:
    budgets = restore_budgets(RestoreSettings(total_tokens=total, user_messages_tokens=users),
                              trigger)
    cap = tail_cap(trigger, fixed, margin, summary, budgets)
    kept = tail.draw(st.integers(0, cap.tokens))
    reserved = summary + budgets.total_tokens + budgets.user_messages_tokens
    if cap.tokens > 0:
        # The estimate applies its margin to everything but `fixed`, which already has it.
        assert fixed + (reserved + kept) * (1 + margin) <= trigger


def test_a_summarized_latest_user_message_beyond_its_budget_takes_its_room_from_the_tail() -> None:
    budgets = RestoreSettings(total_tokens=0, user_messages_tokens=500)
    cap = tail_cap(10_000, 1_000, 0.0, 2_000, budgets, latest_user=7, latest_user_tokens=1_700)
    assert cap.at(7) == cap.tokens, "a tail that keeps it raw counts it itself"
    assert cap.at(8) == cap.tokens - 1_200, "restored whole, it takes its excess off the tail"


# ------------------------------------------------------------------ the cut


def _th(keep: int, trigger: int = 10_000) -> Thresholds:
    return Thresholds(trigger=trigger, limit=2 * trigger, keep_tokens=keep, keep_messages=None,
                      profiled=True)


@given(sessions, st.integers(0, 3000), st.integers(0, 3000), st.integers(0, 2000))
def test_the_planned_tail_stays_within_the_cap_unless_it_is_the_minimal_one(
        case: tuple, keep: int, cap_tokens: int, excess: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    cap = TailCap(cap_tokens, _latest_user(entries), excess)
    cut = choose_cutoff(entries, sizes(entries), _th(keep), PARTIAL, cap=cap)
    if cut is None:
        return
    assert_valid_cut(entries, cut.index)
    kept = sum(sizes(entries)[cut.index:])
    if cut.index != _minimal(entries):
        assert kept <= min(keep, cap.at(cut.index))


@given(sessions, st.integers(500, 20_000), st.integers(0, 3_000), st.floats(0.0, 0.2),
       st.integers(0, 4_096), st.integers(0, 2_000), st.integers(0, 1_000))
def test_a_planned_tail_and_everything_else_fit_under_the_trigger(
        case: tuple, trigger: int, fixed: int, margin: float, summary: int, files: int,
        users: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    measured = sizes(entries)
    latest = _latest_user(entries)
    budgets = restore_budgets(RestoreSettings(total_tokens=files, user_messages_tokens=users),
                              trigger)
    cap = tail_cap(trigger, fixed, margin, summary, budgets, latest,
                   measured[latest] if latest >= 0 else 0)
    cut = choose_cutoff(entries, measured, _th(keep=trigger, trigger=trigger), PARTIAL, cap=cap)
    if cut is None or cut.index == _minimal(entries):
        return  # the minimal tail is kept whatever it costs; the post-check judges it
    quoted = budgets.user_messages_tokens
    if 0 <= latest < cut.index:  # summarized, no user message kept raw: restored whole
        quoted = max(quoted, measured[latest])
    rest = summary + budgets.total_tokens + quoted + sum(measured[cut.index:])
    assert fixed + rest * (1 + margin) <= trigger


@given(sessions, st.integers(0, 3000), st.integers(0, 3000))
def test_the_cap_bounds_a_tail_kept_by_messages_too(case: tuple, keep: int,
                                                    cap_tokens: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    by_messages = Thresholds(trigger=10_000, limit=10_000, keep_tokens=None, keep_messages=6,
                             profiled=False)
    cut = choose_cutoff(entries, sizes(entries), by_messages, PARTIAL, cap=TailCap(cap_tokens))
    if cut is None:
        return
    assert_valid_cut(entries, cut.index)
    if cut.index != _minimal(entries):
        assert sum(sizes(entries)[cut.index:]) <= cap_tokens
        assert len(entries) - cut.index <= 6


@given(sessions, st.integers(0, 3000))
def test_no_cap_cuts_as_before(case: tuple, keep: int) -> None:
    api, leading, plan = case
    entries = conv(api, session(api, leading, plan))
    roomy = TailCap(10 ** 9)
    assert (choose_cutoff(entries, sizes(entries), _th(keep), PARTIAL, cap=roomy)
            == choose_cutoff(entries, sizes(entries), _th(keep), PARTIAL))


# ------------------------------------------------------------------ end to end


def test_a_keep_ratio_near_the_trigger_still_compacts(make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction={**NO_CHEAP, **NEAR})
    # An agent's tool loop after one task: the task is summarized, so it comes back whole.
    request = task_then_loop(task_lines=250, steps=8)
    assert int(LIMIT * 0.6) < chat_prompt_tokens({"messages": request}) < LIMIT
    fake.script(Reply.text("ok"))
    answer = _post(proxy, request, "near")
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-compaction"] == "compacted" and summarizer.calls >= 1
    sent = _main_requests(fake)[-1].json["messages"]
    assert chat_prompt_tokens({"messages": sent}) <= int(LIMIT * 0.6)
    assert sent[-2:] == request[-2:], "the pending tool group is kept raw"
    assert any(request[1]["content"] in str(m["content"]) for m in sent), "the task, whole"
    assert not proxy.logs.events("compaction_failed")


def test_a_system_prompt_over_the_trigger_is_refused_before_the_summarizer_is_paid(
        make_fake, make_proxy) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    proxy = make_proxy(fake, models=MODELS, compaction=NO_CHEAP)
    system = {"role": "system", "content": "".join(f"rule {i:04d}: follow this rule\n"
                                                   for i in range(1300))}
    turns = [{"role": role, "content": f"{role} turn {k}: " + "some words " * 60}
             for k in range(13) for role in ("user", "assistant")]
    request = [system, *turns[:-1]]
    assert int(LIMIT * 0.75) < chat_prompt_tokens({"messages": request}) < LIMIT
    answer = _post(proxy, request, "big-system")
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "context_compaction_insufficient"
    assert summarizer.calls == 0, "a summary was paid for that could not help"
    failed = proxy.logs.events("compaction_failed")
    assert [(f["stage"], f["degraded"]) for f in failed] == [("post_check", False)]
    assert "no summary was asked for" in failed[0]["error"]
    assert not proxy.logs.events("compaction_started")
    assert not _main_requests(fake)
