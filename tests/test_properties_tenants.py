"""Tenant isolation through a running proxy (SPEC §2): another tenant's traffic changes nothing.

State is keyed by (tenant, thread id), the tenant being a digest of the credential presented.
Here tenant A replays an agent session request by request while tenant B, with another
credential (another key, another header, or none at all), sends its own requests in between,
mostly under the same thread id, named the same way or another (header, body field, or the
fingerprint both sessions share). B's session is A's own (a colleague on the same task: B's
checkpoints would fit A's list), A's with the first task edited (a branch), or another one.
Requests come 30 s apart, up to three after an idle night, so microcompact marks and idle
times are in play as well as anchors, checkpoints and summaries, in a model window small enough
to compact; in most examples the proxy restarts somewhere in between, so the state A gets back
comes from the store as well as from the proxy's caches. In two of three the upstream counts
more tokens than the proxy estimates, so the usage anchors, not the proxy's own count, make
the `x-context-tokens` estimate and the decision to compact (SPEC §6).

Then A's requests are replayed alone, at the same times, into a fresh proxy and fake upstream.
Each of A's requests must see exactly what it saw beside B: the same status, the same
`x-context-tokens` estimate and `x-compaction` verdict, and the same upstream bodies, the
summarizer's requests included, byte for byte. And what the state holds for A at the end, as
a restarted proxy reads it back (anchors, microcompact mark, last activity, checkpoints, the
history file), is the same.
"""

from __future__ import annotations

from dataclasses import replace

from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from proxy.records import CompactionEvent, ThreadState
from proxy.testing.sessions import coding_session
from tests.harness import LoopThread
from tests.session_rig import Clock, Rig, Sent, turn_points

LIMIT = 7000
STEP, IDLE = 30.0, 7 * 3600.0
THREAD = "team-thread"
A_KEY = {"authorization": "Bearer sk-tenant-a-0123456789"}
# B's credential: another key in each header the proxy reads, or none (the anonymous tenant).
B_KEYS = ({"authorization": "Bearer sk-tenant-b-0123456789"}, {"api-key": "sk-tenant-b-0123456789"},
          {"x-api-key": "sk-tenant-a-0123456789-b"}, {})
# Where a request names its thread (SPEC §2's sources, and the fingerprint without one).
SOURCES = ("header:x-thread-id", "header:session_id", "body:prompt_cache_key", "body:metadata.thread_id",
           "fingerprint")


def naming(source: str, thread: str) -> tuple[dict[str, str], dict[str, Any]]:
    """Headers and body fields that name `thread` the way `source` says."""
    where, name = source.split(":") if ":" in source else (source, "")
    if where == "header":
        return {name: thread}, {}
    if name == "metadata.thread_id":
        return {}, {"metadata": {"thread_id": thread}}
    if where == "body":
        return {}, {name: thread}
    return {}, {}


@st.composite
def two_tenants(draw: st.DrawFn) -> dict[str, Any]:
    """What to replay, by name and size: the sessions themselves are rebuilt from it."""
    case: dict[str, Any] = {
        "api": draw(st.sampled_from(("chat", "responses"))), "seed": draw(st.integers(0, 10**6)),
        "sizes": {"a": draw(st.integers(20, 40)), "b": draw(st.integers(12, 40))},
        "kind": draw(st.sampled_from(("the same session", "a branch of it", "another session"))),
        "counts_more": draw(st.sampled_from((True, True, False)))}
    sessions = sessions_of(case)
    points = {who: len(turn_points(case["api"], s)) for who, s in sessions.items()}
    # Who sends next, and after how long: B's requests fall anywhere among A's.
    order = draw(st.permutations(["a"] * points["a"] + ["b"] * points["b"]))
    same_thread = draw(st.integers(0, 3)) > 0
    return case | {
        "order": "".join(order), "idle": sorted(draw(st.sets(st.integers(0, len(order) - 1), max_size=3))),
        # A restart somewhere (or none): state then comes from the store, not the proxy's caches.
        "restart": draw(st.integers(1, len(order) - 1) | st.just(len(order))),
        "naming": {"a": naming(draw(st.sampled_from(SOURCES)), THREAD),
                   "b": naming(draw(st.sampled_from(SOURCES)), THREAD if same_thread else "b-thread")},
        "keys": {"a": A_KEY, "b": draw(st.sampled_from(B_KEYS))}}


def sessions_of(case: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    api, seed, sizes = case["api"], case["seed"], case["sizes"]
    a_session = coding_session(sizes["a"], seed=seed, api=api)
    b_session = coding_session(sizes["b"], seed=seed if case["kind"] != "another session" else seed + 1,
                               api=api)
    if case["kind"] == "a branch of it":
        first = next(i for i, e in enumerate(b_session) if e.get("role") == "user")
        b_session[first] = _edited(api, b_session[first])
    return {"a": a_session, "b": b_session}


def _edited(api: str, message: dict[str, Any]) -> dict[str, Any]:
    if api == "chat":
        return {**message, "content": f"{message['content']} (and keep the old API)"}
    part = message["content"][0]
    return {**message, "content": [{**part, "text": f"{part['text']} (and keep the old API)"}]}


def run(loop: LoopThread, case: dict[str, Any], tenants: str) -> tuple[list[Sent], Any]:
    """The requests of `tenants` ("ab" or "a") in the drawn order and at the drawn times, into
    a fresh proxy; what each of A's requests produced, and what the state holds for A after."""
    api, sessions = case["api"], sessions_of(case)
    points = {who: iter(turn_points(api, s)) for who, s in sessions.items()}
    sent_by_a = []
    with Rig(loop, LIMIT, counts_more=case["counts_more"]) as rig:
        at = rig.clock.now
        for n, who in enumerate(case["order"]):
            if n == case["restart"]:
                rig.restart()
            at += IDLE if n in case["idle"] else STEP  # B's turns pass time for A alone too
            k = next(points[who])
            if who not in tenants:
                continue
            headers, fields = case["naming"][who]
            sent = rig.send(api, sessions[who], k, {**case["keys"][who], **headers}, at, fields)
            if who == "a":
                sent_by_a.append(sent)
        line = sent_by_a[0].line
        return sent_by_a, rig.stored(line["tenant"], line["thread"])


def _difference(shared: Sent, own: Sent) -> str:
    if (shared.status, shared.compaction) != (own.status, own.compaction):
        return f"status/x-compaction {shared.status}/{shared.compaction} beside B, {own.status}/{own.compaction} alone"
    if shared.tokens != own.tokens:
        return f"x-context-tokens {shared.tokens} beside B, {own.tokens} alone"
    if len(shared.upstream) != len(own.upstream):
        return f"{len(shared.upstream)} upstream requests beside B, {len(own.upstream)} alone"
    for i, (a, b) in enumerate(zip(shared.upstream, own.upstream, strict=True)):
        if a != b:
            at = next(j for j in range(min(len(a), len(b)) + 1) if a[j:j + 1] != b[j:j + 1])
            return f"upstream body {i} differs at byte {at}: {a[at - 80:at + 80]!r} / {b[at - 80:at + 80]!r}"
    return ""


def check_stored(beside_b: tuple[ThreadState, list[CompactionEvent], bytes],
                 alone: tuple[ThreadState, list[CompactionEvent], bytes]) -> None:
    (state, events, history), (own_state, own_events, own_history) = beside_b, alone
    assert history == own_history, "A's history file holds B's messages"
    assert events == own_events, "A's checkpoints hold B's"
    assert _without_item_ids(state) == _without_item_ids(own_state), \
        "A's stored state (anchors, microcompact mark, activity) holds B's"


def _without_item_ids(state: ThreadState) -> ThreadState:
    """The state with its anchors' Responses item ids left out: upstream names the items of its
    answers (the fake numbers them across all requests, B's too), and the anchor keeps those
    names for echoes by `item_reference`. What the proxy itself stores is the rest."""
    return replace(state, anchors=tuple(
        replace(a, response_digests=tuple(d.split(" ")[0] for d in a.response_digests))
        for a in state.anchors))


@settings(max_examples=10, deadline=None)
@given(case=two_tenants())
def test_another_tenant_on_the_same_thread_changes_nothing_a_sees(loop_thread, case) -> None:
    beside_b, stored_beside_b = run(loop_thread, case, "ab")
    alone, stored_alone = run(loop_thread, case, "a")
    event(f"B: {case['kind']}")
    event("restarted" if case["restart"] < len(case["order"]) else "no restart")
    event("A compacted" if any(s.compaction == "compacted" for s in alone) else "A never compacted")
    event("A got an error" if any(s.status != 200 for s in alone) else "A got 200s")
    assert len(beside_b) == len(alone)
    for n, (shared, own) in enumerate(zip(beside_b, alone, strict=True)):
        found = _difference(shared, own)
        assert not found, f"A's request {n} saw B's state: {found}"
    check_stored(stored_beside_b, stored_alone)


def test_a_tenants_estimate_does_not_depend_on_what_another_tenant_counted_first(loop_thread) -> None:
    """B works through a session on its own thread and compacts (restoring files); the proxy
    restarts; B sends its last request again; then A works through the same session on its
    thread. A's estimates are what A alone gets: B's rebuilt projection counted the restored
    file messages first, and A's compactions restore the same ones (when a compaction's bound
    for a restored file reached the shared entry cache, A alone got a few tokens more from its
    third compaction on)."""
    elements = coding_session(32, seed=0, api="chat")
    points = turn_points("chat", elements)
    a = {"authorization": "Bearer sk-tenant-a", "x-thread-id": "a-thread"}
    b = {"authorization": "Bearer sk-tenant-b", "x-thread-id": "b-thread"}
    start = Clock().now + 10 * len(points) * STEP  # A's first request, in both runs

    def a_works(rig: Rig) -> list[str | None]:
        return [rig.send("chat", elements, k, a, start + n * STEP).tokens for n, k in enumerate(points)]

    with Rig(loop_thread, 8000) as rig:
        for k in points:
            assert rig.send("chat", elements, k, b, rig.clock.now + STEP).status == 200
        rig.restart()
        rig.send("chat", elements, points[-1], b, rig.clock.now + STEP)
        beside_b = a_works(rig)
    with Rig(loop_thread, 8000) as rig:
        rig.restart()
        alone = a_works(rig)
    assert beside_b == alone
