"""What one LLM compaction costs the proxy, and what the projections look like around it.

A synthetic coding-agent thread of 2,000 messages is replayed through an in-process proxy and
fake upstream (with the fake summarizer) whose model window is small enough to compact every
so often. For each compaction: the proxy-side work (the compaction's duration minus the
summarizer's own calls), and the projection right after it as a share of the window, against
the budget keep_ratio + summary + restore. Between two compactions: the share of consecutive
requests whose projection starts with the previous projection byte for byte (minus its end).

    .venv/bin/python scripts/bench_compaction.py [--messages 2000] [--window 64000]
    .venv/bin/python scripts/bench_compaction.py --traces ../shared/traces/open-agents.jsonl \
        --window 16000

`--traces FILE` replays recorded conversations instead (JSON lines, each with `messages` and
`tools`), one thread each, and also reports how many requests succeeded, used a usage anchor and
were parsed as a delta of the thread's previous request.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402
from proxy.testing.replies import Reply  # noqa: E402
from proxy.testing.sessions import coding_session  # noqa: E402
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request  # noqa: E402
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy  # noqa: E402


@dataclass
class Conversation:
    thread: str
    messages: list[dict]
    tools: list[dict] | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--window", type=int, default=64_000)
    parser.add_argument("--traces", type=Path, help="replay these recorded conversations")
    args = parser.parse_args()
    loop = LoopThread()
    fake = FakeUpstream(limits={"bench-*": args.window})
    loop.run(fake.start())
    FakeSummarizer.install(fake)
    with tempfile.TemporaryDirectory() as state:
        proxy = loop.run(start_proxy(proxy_settings(
            fake.url, state, models={"bench-*": {"max_input_tokens": args.window}},
            logging={"level": "info"})))
        try:
            run(proxy, fake, args)
        finally:
            loop.run(stop_proxy(proxy))
            loop.run(fake.stop())
            loop.close()


def conversations(args: argparse.Namespace) -> list[Conversation]:
    if args.traces is None:
        return [Conversation("bench", coding_session(args.messages, seed=21))]
    with args.traces.open("rb") as lines:
        return [Conversation(f"trace-{n}", record["messages"], record.get("tools"))
                for n, record in enumerate(map(orjson.loads, lines))]


def run(proxy, fake: FakeUpstream, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    replayed = conversations(args)
    bodies: list[list[bytes]] = []  # per conversation, what the model received each turn
    started = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for conversation in replayed:
            bodies.append(replay(client, proxy.base_url, fake, conversation))
    elapsed = time.perf_counter() - started
    lines = proxy.requests()
    done = proxy.logs.events("compaction_completed")
    where = (f"{len(replayed)} recorded conversations ({sum(map(len, bodies))} turns)"
             if args.traces else f"a {args.messages}-message thread")
    print(f"{len(lines)} requests over {where} in {elapsed:.1f} s; "
          f"window {args.window:,} tokens; {len(done)} compactions")
    if args.traces:
        report_replay(lines, bodies)
    if not done:
        return
    work = [e["duration_ms"] - e["summarizer_ms"] for e in done]
    print(f"proxy-side work per compaction (duration - summarizer): p50 {statistics.median(work):.1f} ms, "
          f"max {max(work):.1f} ms")
    print("  each: tokens before -> after (summary + restore + the rest: instructions, tools, kept tail)")
    started_events = proxy.logs.events("compaction_started")
    for e, begun in zip(done, started_events):
        rest = e["tokens_after"] - e["summary_tokens"] - e["restore_tokens"]
        print(f"    {e['tokens_before']:>7,} -> {e['tokens_after']:>6,} = {e['summary_tokens']:>5,} + "
              f"{e['restore_tokens']:>5,} + {rest:>6,}   work {e['duration_ms'] - e['summarizer_ms']:.1f} ms"
              f" ({begun['summarizer_calls']} summarizer call(s), "
              f"{begun['summarized_messages']} messages summarized)")
    after = [e["tokens_after"] / args.window for e in done]
    summary = [e["summary_tokens"] / args.window for e in done]
    # The budget of issue 5: keep_ratio + summary + restore (files <= 15%, users <= 8% of the trigger).
    trigger = 0.75 * args.window
    within = sum(e["tokens_after"] <= 0.10 * args.window + e["summary_tokens"] + 0.23 * trigger
                 for e in done)
    print(f"projection after compaction: p50 {statistics.median(after):.1%} of the window, "
          f"max {max(after):.1%}; summary p50 {statistics.median(summary):.1%}; "
          f"{within}/{len(done)} within keep 10% + summary + restore budget (23% of the trigger)")
    stable = total = checked = 0
    for per_thread, thread_lines in zip(bodies, by_conversation(lines, bodies)):
        pairs = stability(per_thread, thread_lines)
        stable, total, checked = stable + pairs[0], total + pairs[1], checked + pairs[2]
    print(f"prefix stability between compactions: {stable / total if total else 1.0:.1%} of "
          f"{total} consecutive requests extend the previous projection byte for byte (the "
          f"previous minus its protected tail: {checked / total if total else 0:.1f} messages "
          "on average)")


def replay(client: httpx.Client, base_url: str, fake: FakeUpstream,
           conversation: Conversation) -> list[bytes]:
    """Send `messages[:k]` at every k where the model speaks next, scripting that answer."""
    messages, sent = conversation.messages, []
    for k in range(1, len(messages)):
        if messages[k]["role"] != "assistant":
            continue
        fake.script(Reply.repeating(messages[k]))
        body = {"model": "bench-model", "messages": messages[:k]}
        if conversation.tools:
            body["tools"] = conversation.tools
        answer = client.post(f"{base_url}/chat/completions", json=body,
                             headers={"x-thread-id": conversation.thread})
        assert answer.status_code == 200, answer.text
        main = [r for r in fake.requests if not is_summarizer_request(r.json)]
        sent.append(main[-1].body)
    return sent


def by_conversation(lines: list[dict], bodies: list[list[bytes]]) -> list[list[dict]]:
    """The request lines split per conversation (each was replayed whole before the next)."""
    out, at = [], 0
    for per_thread in bodies:
        out.append(lines[at:at + len(per_thread)])
        at += len(per_thread)
    return out


def report_replay(lines: list[dict], bodies: list[list[bytes]]) -> None:
    later = [line for thread_lines in by_conversation(lines, bodies) for line in thread_lines[1:]]
    statuses = sorted({line["status"] for line in lines})
    anchored = sum(bool(line.get("anchor_used")) for line in later)
    delta = sum(bool(line.get("elements_reused")) for line in later)
    retried = sum(bool(line.get("retried")) for line in lines)
    print(f"  statuses {statuses}; upstream retries {retried}; after each thread's first turn: "
          f"usage anchor used on {anchored}/{len(later)}, delta parse on {delta}/{len(later)}")


def stability(bodies: list[bytes], lines: list[dict]) -> tuple[int, int, int]:
    """(stable, compared, messages checked) over one thread's consecutive requests."""
    stable = total = checked = 0
    for n in range(1, len(bodies)):
        if lines[n].get("compaction") == "compacted" or lines[n - 1].get("compaction") == "compacted":
            continue
        previous = orjson.loads(bodies[n - 1])["messages"]
        current = orjson.loads(bodies[n])["messages"]
        total += 1
        # The previous projection minus its protected window (the client's messages at its end
        # that a cheap stage may still change) must be a prefix of this one.
        keep = lines[n - 1].get("protected", 0)
        head = previous[:len(previous) - keep]
        stable += current[:len(head)] == head
        checked += len(head)
    return stable, total, checked


if __name__ == "__main__":
    main()
