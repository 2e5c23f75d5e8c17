"""Prefix stability from turn to turn, through a running proxy with the real policy (SPEC §4, §5).

A recorded agent session (either API) is replayed request by request into a proxy whose model
window is small, so the cheap stages, LLM compactions and rebuilds from the checkpoint all
happen within a few dozen messages; the window's start moves in steps or on every request
(`window_step_ratio` 0.05 or 0). Between two requests without a compaction, SPEC §4 promises
that "the projection of request N+1 starts with the projection of request N except where a
message newly left the recent window": every message of request N's upstream body before its
protected window (the log line's `protected` counts the client's messages at the end) comes
back byte for byte in request N+1's, so upstream prompt caches keep hitting. A request that
compacts starts a new projection (SPEC §5) and is not compared with the one before it.

The one other change SPEC allows in that prefix is microcompact's (SPEC §4.3): after an idle
time longer than `idle_seconds`, an old tool result may become the cleared marker, and then it
stays cleared ("sticky") on the requests that follow. So a result is cleared only by an idle
request, before a compaction or after it. Idle counts from the last request the model saw: one
the proxy rejects itself (a post-check 400) is no activity of the thread, and the request after
it is still idle.

The sessions carry no provider reasoning: SPEC §7.2's drop of the previous tool loop's plain
reasoning once a new user message arrives is a change this file does not model.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

import orjson
from hypothesis import event, given, settings
from hypothesis import strategies as st

from proxy.core.microcompact import CLEARED_TEXT
from proxy.testing.sessions import coding_session
from tests.harness import LoopThread
from tests.session_rig import Rig, Sent, body_elements, turn_points

IDLE = 7 * 3600.0  # longer than the default idle_seconds (6 h)
STEP = 30.0
HEADERS = {"authorization": "Bearer sk-prefix", "x-thread-id": "prefix-stability"}


@st.composite
def replays(draw: st.DrawFn, max_idle: int) -> dict[str, Any]:
    """A session, the model window, and which requests (one to `max_idle`) come after an
    idle time."""
    api = draw(st.sampled_from(("chat", "responses")))
    elements = coding_session(draw(st.integers(30, 70)), seed=draw(st.integers(0, 10**6)), api=api)
    points = turn_points(api, elements)
    # Past the first third: an idle time clears only results older than the latest five.
    idle = draw(st.sets(st.integers(max(1, len(points) // 3), len(points) - 1), min_size=1, max_size=max_idle))
    return {"api": api, "elements": elements, "points": points, "idle": idle,
            "limit": draw(st.sampled_from((6000, 8000))),
            "step": draw(st.sampled_from((0.05, 0.0)))}


def replay(loop: LoopThread, case: dict[str, Any]) -> list[Sent]:
    api, elements = case["api"], case["elements"]
    out = []
    with Rig(loop, case["limit"], compaction={"window_step_ratio": case["step"]}) as rig:
        at = rig.clock.now
        for t, k in enumerate(case["points"]):
            at += IDLE if t in case["idle"] else STEP
            out.append(rig.send(api, elements, k, HEADERS, at))
    return out


def _cleared_result(element: bytes) -> str | None:
    """The call id of a tool result whose content is the cleared marker."""
    doc = orjson.loads(element)
    if doc.get("role") == "tool" and doc.get("content") == CLEARED_TEXT:
        return str(doc.get("tool_call_id"))
    if str(doc.get("type", "")).endswith("_call_output") and doc.get("output") == CLEARED_TEXT:
        return str(doc.get("call_id"))
    return None


def _same_result(old: bytes, new: bytes) -> bool:
    """`new` is `old` (a tool result) with its content cleared, nothing else changed."""
    cleared = _cleared_result(new)
    if cleared is None:
        return False
    before, after = orjson.loads(old), orjson.loads(new)
    key = "content" if "role" in before else "output"
    return {**before, key: CLEARED_TEXT} == after


def _comparable(old: Sent, new: Sent) -> bool:
    if old.status != 200 or new.status != 200 or old.main is None or new.main is None:
        return False
    return new.compaction != "compacted" and not new.line.get("retried")


def check_prefix(api: str, old: Sent, new: Sent, idle: bool) -> None:
    assert old.main is not None and new.main is not None
    before, after = body_elements(api, old.main), body_elements(api, new.main)
    stable = len(before) - old.line["protected"]
    assert len(after) >= stable, "the new projection is shorter than the old one's stable prefix"
    for i in range(stable):
        if after[i] == before[i]:
            continue
        assert idle and _same_result(before[i], after[i]), \
            f"message {i} of the stable prefix changed:\n{before[i][:300]!r}\n{after[i][:300]!r}"
        event("an idle request cleared a result in the stable prefix")


@settings(max_examples=12, deadline=None)
@given(case=replays(max_idle=2))
def test_between_compactions_a_projection_starts_with_the_previous_one(loop_thread, case) -> None:
    api = case["api"]
    sent = replay(loop_thread, case)
    compared = 0
    for t, (old, new) in enumerate(pairwise(sent), 1):
        if _comparable(old, new):
            check_prefix(api, old, new, t in case["idle"])
            compared += 1
    checkpoints = sum(s.compaction == "compacted" for s in sent)
    event(f"compactions: {min(checkpoints, 3)}{'+' if checkpoints >= 3 else ''}")
    event("a rebuilt projection was compared" if any(
        s.compaction == "applied" and s.line.get("checkpoint") for s in sent[1:]) else "no rebuild")
    assert compared, "no two requests to compare"


# ---------------------------------------------------------------- microcompact: only when idle

def _cleared(api: str, sent: Sent) -> set[str]:
    assert sent.main is not None
    return {c for c in map(_cleared_result, body_elements(api, sent.main)) if c is not None}


def newly_cleared_without_idle(api: str, sent: list[Sent],
                               idle: set[int]) -> list[tuple[int, set[str]]]:
    """(request, call ids) where a request cleared a result no earlier request had cleared,
    though no idle time had passed since the model last saw the thread.

    Idle time counts from the last request the proxy forwarded, as the proxy counts it: one it
    rejected itself (a post-check 400) reached no model and warmed no cache, and records no
    activity, so an idle time before it is still pending for the next request."""
    found = []
    ever: set[str] = set()
    pending = False  # an idle time passed since the last forwarded request
    for t, one in enumerate(sent):
        pending = pending or t in idle
        if one.main is None:
            continue
        if one.status == 200:
            cleared = _cleared(api, one)
            if not pending and cleared - ever:
                found.append((t, cleared - ever))
            ever |= cleared
        pending = False
    return found


@settings(max_examples=8, deadline=None)
@given(case=replays(max_idle=4))
def test_microcompact_clears_a_result_only_on_an_idle_request(loop_thread, case) -> None:
    """SPEC §4.3: results are cleared when the thread was idle; later requests only keep them
    cleared, compactions included."""
    sent = replay(loop_thread, case)
    event("an idle request cleared results" if any(_cleared(case["api"], s) for s in sent
                                                   if s.main is not None) else "nothing cleared")
    assert newly_cleared_without_idle(case["api"], sent, case["idle"]) == []


def _step(i: int, lines: Sequence[int]) -> list[dict[str, Any]]:
    """An assistant message with one bash call per entry of `lines`, then their results."""
    ids = [f"call_{i}_{c}" for c in range(len(lines))]
    calls = [{"id": cid, "type": "function",
              "function": {"name": "bash", "arguments": f'{{"cmd": "make test{i} part{c}"}}'}}
             for c, cid in enumerate(ids)]
    results = [{"role": "tool", "tool_call_id": cid,
                "content": "".join(f"step {i}.{c} output line {j}\n" for j in range(n))}
               for c, (cid, n) in enumerate(zip(ids, lines, strict=True))]
    return [{"role": "assistant", "content": None, "tool_calls": calls}, *results]


def _tool_loop(*steps: Sequence[int]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                 {"role": "user", "content": "Make the tests pass."}]
    for i, lines in enumerate(steps):
        out += _step(i, lines)
    return [*out, {"role": "assistant", "content": "Done."}]


def test_after_an_idle_request_and_a_compaction_no_new_result_is_cleared(loop_thread) -> None:
    """One tool loop of 12 steps in a 4,000-token window: the 8th request comes after an idle
    night and clears the two oldest results; the 10th compacts; the 11th, 30 s later, clears
    the result of step 8, which did not exist during the idle time."""
    elements = _tool_loop(*[[50]] * 12)
    points = turn_points("chat", elements)
    case = {"api": "chat", "elements": elements, "points": points, "idle": {7}, "limit": 4000,
            "step": 0.05}
    sent = replay(loop_thread, case)
    assert [s.status for s in sent] == [200] * len(points)
    assert any(s.compaction == "compacted" for s in sent[8:])
    assert newly_cleared_without_idle("chat", sent, case["idle"]) == []


def test_a_request_after_a_rejected_idle_request_is_idle_too(loop_thread) -> None:
    """Six small steps, then one call of six results, the first one big, all still in the
    protected window: the request after an idle night compacts, and the post-check rejects it
    (400, nothing reached the model). The next one, 30 s later, is the first the model sees
    since the night: microcompact clears the old results and the first two of the six (the
    latest five stay), as on any idle request."""
    elements = _tool_loop(*[[50]] * 6, [430, 40, 40, 40, 40, 40], [90])
    points = turn_points("chat", elements)
    case = {"api": "chat", "elements": elements, "points": points, "idle": {7}, "limit": 6000,
            "step": 0.05}
    sent = replay(loop_thread, case)
    assert [s.status for s in sent] == [200] * 7 + [400, 200]
    assert sent[7].main is None and sent[7].line["compaction_failed"] == "post_check"
    assert _cleared("chat", sent[8]) == {*(f"call_{i}_0" for i in range(7)), "call_6_1"}
    assert newly_cleared_without_idle("chat", sent, case["idle"]) == []
