"""SPEC §5: a checkpoint is written atomically; a crash leaves the old event or the new one,
never half, and the history file never holds a half line that breaks the next read.

Each example writes a drawn sequence of checkpoints (unicode, large summaries, None where a
field allows it), anchors, touches and microcompact marks, over a few threads, in a child
process (`tests/checkpoint_writer.py`) that dies at a drawn point: inside any SQLite statement
of the store's connection, or half-way through a history-file write. The test then reopens the
real SQLite file and checks that what it holds is exactly what a prefix of the writes made,
field for field and for every thread at once, that the file passes SQLite's checks, and that
the history file holds whole lines up to the end the last checkpoint recorded and at most a
torn line of the interrupted offload after it, which the next compaction cuts off.
"""

from __future__ import annotations

import asyncio
import pickle
import subprocess
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from proxy.records import Anchor, CompactionEvent, MicrocompactMark, ThreadKey
from proxy.server.compactor import committed_end
from proxy.store import ANCHORS_KEPT, HistoryFiles, SqliteStore
from proxy.store.history import parse_lines
from proxy.store.keys import storable_key
from tests.checkpoint_writer import (CRASHED, OFFLOAD_ERROR, AnchorWrite, EventWrite, Flush,
                                     MarkWrite, Plan, TouchWrite, Write)
from tests.process import child_env

# Each example runs a child process (twice the writes: a count, then the crash), so a few dozen.
EXAMPLES = 30 if settings.default.max_examples <= 100 else 300
REPO = Path(__file__).resolve().parents[1]
CHILD = "import sys\nfrom tests.checkpoint_writer import main\nmain(sys.argv[1])\n"

# Text as clients send it: any unicode, a NUL, and lone surrogates (which orjson refuses).
texts = st.one_of(
    st.text(max_size=24),
    st.builds(lambda a, b: f"{a}\udc80{b}\x00", st.text(max_size=6), st.text(max_size=6)))
large_texts = st.builds(lambda unit, times: unit * times, texts.filter(bool),
                        st.integers(1, 20_000))
counts = st.integers(0, 2**31)
times = st.floats(0, 4e9, allow_nan=False)
# Integers within 64 bits: the request's parse turns larger ones into floats already
# (`proxy/jsonio.py`), so no message the proxy stores holds one.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=8)
messages = st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool"]),
                                  "content": texts | large_texts},
                                 optional={"extra": json_values})
events = st.builds(
    CompactionEvent, cutoff_index=counts, cutoff_message_id=st.none() | texts,
    prefix_digest=texts, summary_message=messages,
    restore_messages=st.lists(messages, max_size=3).map(tuple),
    strategy=st.sampled_from(["partial", "full", "manual"]), tokens_before=counts,
    tokens_after=counts, created_at=times, model=texts, summarizer_model=texts,
    api=st.sampled_from(["chat", "responses"]), trigger=counts)
anchors = st.builds(Anchor, st.lists(texts, max_size=3).map(tuple), counts, texts, counts,
                    counts, counts, counts, texts, times)
marks = st.builds(MicrocompactMark, st.none() | texts, counts, times)
thread_keys = st.builds(ThreadKey, texts, texts)


@st.composite
def plans(draw: st.DrawFn) -> tuple[list[ThreadKey], Plan]:
    keys = draw(st.lists(thread_keys, min_size=1, max_size=3,
                         unique_by=lambda key: storable_key(key)))
    key = st.sampled_from(keys)
    write = st.one_of(
        st.builds(EventWrite, key, events, st.lists(messages, max_size=3).map(tuple),
                  st.booleans()),
        st.builds(AnchorWrite, key, anchors),
        st.builds(TouchWrite, key, times, st.none() | counts),
        st.builds(MarkWrite, key, marks),
        st.just(Flush()))
    writes = draw(st.lists(write, min_size=1, max_size=10).map(tuple))
    # A crash at the very end (1.0, about one example in ten) is no crash: the writes all commit.
    share = draw(st.floats(0, 1.1).map(lambda drawn: min(drawn, 1.0)))
    within, tear = draw(st.integers(0, 200)), draw(st.floats(0, 1))
    return keys, Plan("", writes, share, within, tear)  # the root: the example's own directory


@dataclass(frozen=True)
class Seen:
    """A thread's state as `load` and `events` give it, the history ends left out (they are
    checked against the file)."""

    present: bool
    events: tuple[CompactionEvent, ...]
    event_count: int
    latest: CompactionEvent | None
    anchors: tuple[Anchor, ...]
    mark: MicrocompactMark | None
    estimate: int | None


def expected(key: ThreadKey, writes: tuple[Write, ...], root: Path) -> Seen:
    """What the thread's state is once these writes (a prefix of the plan's) committed."""
    mine = [w for w in writes if not isinstance(w, Flush) and w.key == key]
    history = str(HistoryFiles.under(root).path_for(key))
    made = []
    for write in mine:
        if isinstance(write, EventWrite):
            failed = write.offload_fails
            made.append(replace(write.event, seq=len(made) + 1, history_end=None,
                                history_file=None if failed else history,
                                offload_error=OFFLOAD_ERROR if failed else None))
    anchored = [w.anchor for w in mine if isinstance(w, AnchorWrite)]
    marked = [w.mark for w in mine if isinstance(w, MarkWrite)]
    estimates = [w.estimate for w in mine if isinstance(w, TouchWrite) and w.estimate is not None]
    return Seen(bool(mine), tuple(made), len(made), made[-1] if made else None,
                tuple(reversed(anchored))[:ANCHORS_KEPT], marked[-1] if marked else None,
                estimates[-1] if estimates else None)


Found = dict[ThreadKey, tuple[Seen, list[CompactionEvent]]]


async def stored(root: Path, keys: list[ThreadKey]) -> Found:
    """Each thread's state in the reopened store (which runs `quick_check` as it opens)."""
    store = SqliteStore(root)
    await store.open()
    try:
        assert await store.integrity_check() == "ok"
        found = {}
        for key in keys:
            state, events = await store.load(key), await store.events(key)
            seen = Seen(state.created_at is not None, tuple(map(_endless, events)),
                        state.event_count, _endless(state.event) if state.event else None,
                        state.anchors, state.microcompact, state.last_estimate)
            found[key] = seen, events
        return found
    finally:
        await store.close()


def _endless(event: CompactionEvent) -> CompactionEvent:
    return replace(event, history_end=None)


def committed_prefix(keys: list[ThreadKey], writes: tuple[Write, ...], root: Path,
                     found: dict[ThreadKey, Seen]) -> int:
    """The length of the prefix of the writes that made every thread's state found; fails
    when no prefix did (half a write, or one without the writes before it)."""
    for length in range(len(writes), -1, -1):
        if all(expected(key, writes[:length], root) == found[key] for key in keys):
            return length
    detail = {key: (found[key], expected(key, writes, root)) for key in keys}
    raise AssertionError(f"no prefix of the writes made this state: {detail!r}")


def check_history(root: Path, key: ThreadKey, writes: tuple[Write, ...],
                  events: list[CompactionEvent]) -> None:
    """Up to the last checkpoint's end, whole lines: each checkpoint's offloaded records, in
    order, numbered; past it at most the interrupted offload's lines, the last maybe torn.
    The next compaction cuts that tail off and its own lines read back whole."""
    history = HistoryFiles.under(root)
    path = history.path_for(key)
    data = path.read_bytes() if path.exists() else b""
    offloads = [w for w in writes if isinstance(w, EventWrite) and w.key == key]
    end, lines = 0, []
    for event, write in zip(events, offloads):
        if write.offload_fails:
            assert event.history_end == end
            continue
        lines_of_it = data[end:event.history_end]
        part = parse_lines(lines_of_it)
        assert part.damaged_lines == () and lines_of_it.count(b"\n") == len(write.records)
        assert lines_of_it.endswith(b"\n") or not write.records
        assert [r["record"] for r in part.records] == list(write.records)
        assert all(r["at"] == write.event.created_at for r in part.records)
        lines += part.records
        end = event.history_end
    assert [r["seq"] for r in lines] == list(range(1, len(lines) + 1))
    interrupted = offloads[len(events)] if len(offloads) > len(events) else None
    tail = parse_lines(data[end:])
    pending = list(interrupted.records) if interrupted and not interrupted.offload_fails else []
    assert [r["record"] for r in tail.records] == pending[:len(tail.records)]
    assert tail.damaged_lines in ((), (data[end:].count(b"\n") + 1,))
    if events:
        assert committed_end(events[-1]) == end
    cut = committed_end(events[-1] if events else None)
    assert cut is not None
    history.discard_tail(key, cut)
    history.offload(key, [{"after": "the crash"}], 1.0)
    again = history.read(path)
    assert again.damaged_lines == ()
    assert [r["record"] for r in again.records] == [r["record"] for r in lines] + [
        {"after": "the crash"}]
    assert [r["seq"] for r in again.records] == list(range(1, len(lines) + 2))


def run_child(plan: Plan) -> int:
    plan_path = Path(plan.root).parent / "plan.pickle"
    plan_path.write_bytes(pickle.dumps(plan))
    child = subprocess.run([sys.executable, "-c", CHILD, str(plan_path)], cwd=REPO,
                           env=child_env(), capture_output=True, timeout=120)
    assert child.returncode in (0, CRASHED), child.stderr.decode(errors="replace")
    return child.returncode


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                       HealthCheck.data_too_large])
@given(plans())
def test_a_crash_leaves_whole_checkpoints_of_a_prefix_of_the_writes(
        drawn: tuple[list[ThreadKey], Plan]) -> None:
    keys, plan = drawn
    writes = plan.writes
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "state"
        status = run_child(replace(plan, root=str(root)))
        event("crashed" if status == CRASHED else "ran to its end")
        found = asyncio.run(stored(root, keys))
        length = committed_prefix(keys, writes, root, {k: seen for k, (seen, _) in found.items()})
        if status == 0:
            assert length == len(writes)
        for key in keys:
            check_history(root, key, writes, found[key][1])
