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
were parsed as a delta of the thread's previous request. The replay behaves like a client: it
sends its history, appends the answer it received, and can speak either API, stream, and talk to
a fake upstream with a provider's stricter rules (see the options). Each turn's upstream request
is checked against SPEC invariants (scripts/trace_replay.py); failures are listed as anomalies.

    .venv/bin/python scripts/bench_compaction.py --traces ../shared/traces/open-agents.jsonl \
        --window 32000 --api responses --stream usage --dialect openai-strict

`--instances N --state redis` replays through N `compaction-proxy serve` processes on a
redis-server of their own (`redis-server` on the PATH), each turn of a thread at the next
instance, as a load balancer might send them (scripts/bench_instances.py).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.testing.dialects import DIALECTS  # noqa: E402
from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402
from proxy.testing.prompt_units import PromptUnits  # noqa: E402
from proxy.testing.replies import Reply  # noqa: E402
from proxy.testing.sessions import coding_session  # noqa: E402
from proxy.testing.summarizer import FakeSummarizer, is_summarizer_request  # noqa: E402
from scripts.bench_instances import redis_instances  # noqa: E402
from scripts.trace_replay import (ClientMode, Sent, check_turn, post_turn,  # noqa: E402
                                  responses_items, unreceived_answer)
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy  # noqa: E402


@dataclass
class Conversation:
    thread: str
    messages: list[dict]
    tools: list[dict] | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000,
                        help="length of the synthetic thread (without --traces)")
    parser.add_argument("--window", type=int, default=64_000,
                        help="the model's input window: its profile and the fake's limit")
    parser.add_argument("--traces", type=Path,
                        help="replay these recorded conversations: a JSON-lines file, or a "
                             "directory of them (every *.jsonl in it, by name)")
    parser.add_argument("--only", type=int, default=None,
                        help="replay only the first N conversations of --traces")
    parser.add_argument("--api", choices=("chat", "responses"), default="chat",
                        help="send the history as chat messages or as Responses input items")
    parser.add_argument("--stream", choices=("off", "usage", "plain"), default="off",
                        help="stream the answers: with stream_options.include_usage, or plain")
    parser.add_argument("--dialect", choices=sorted(DIALECTS), default="openai",
                        help="the fake upstream's provider rules (chat API)")
    parser.add_argument("--strategy", choices=("partial", "full"), default="partial",
                        help="compaction.strategy of the proxy")
    parser.add_argument("--trigger-ratio", type=float, default=0.75,
                        help="compaction.trigger_ratio of the proxy")
    parser.add_argument("--keep-ratio", type=float, default=0.10,
                        help="compaction.keep_ratio of the proxy (below --trigger-ratio)")
    parser.add_argument("--no-profile", action="store_true",
                        help="a model without a profile: the proxy falls back to its defaults "
                             "(trigger at 100,000 tokens, keep 6 messages); the fake keeps --window")
    parser.add_argument("--instances", type=int, default=1,
                        help="proxy processes, turns alternating between them (needs --state redis)")
    parser.add_argument("--state", choices=("sqlite", "redis"), default="sqlite",
                        help="the proxies' state backend (redis: a redis-server of their own)")
    args = parser.parse_args()
    if args.instances > 1 and args.state != "redis":
        parser.error("--instances above 1 needs --state redis (shared state)")
    loop = LoopThread()
    fake = FakeUpstream(limits={"bench-*": args.window, "unprofiled-*": args.window},
                        dialect=args.dialect)
    loop.run(fake.start())
    FakeSummarizer.install(fake)
    sections: dict = dict(models={"bench-*": {"max_input_tokens": args.window}},
                          compaction={"strategy": args.strategy, "trigger_ratio": args.trigger_ratio,
                                      "keep_ratio": args.keep_ratio},
                          logging={"level": "info"})
    with tempfile.TemporaryDirectory() as state:
        try:
            if args.state == "redis":
                with redis_instances(args.instances, fake.url, Path(state), **sections) as proxies:
                    run(proxies, fake, args)
            else:
                proxy = loop.run(start_proxy(proxy_settings(fake.url, state, **sections)))
                try:
                    run(proxy, fake, args)
                finally:
                    loop.run(stop_proxy(proxy))
        finally:
            loop.run(fake.stop())
            loop.close()


def conversations(args: argparse.Namespace) -> list[Conversation]:
    if args.traces is None:
        return [Conversation("bench", coding_session(args.messages, seed=21))]
    files = sorted(args.traces.glob("*.jsonl")) if args.traces.is_dir() else [args.traces]
    records = [orjson.loads(line) for path in files for line in path.read_bytes().splitlines()
               if line.strip()]
    found = [Conversation(f"trace-{n}", record["messages"], record.get("tools"))
             for n, record in enumerate(records)]
    return found[:args.only]


@dataclass
class Replayed:
    """One client turn and the main (non-summarizer) requests upstream received for it."""

    sent: Sent
    upstream: list[bytes]


def run(proxy, fake: FakeUpstream, args: argparse.Namespace) -> None:  # type: ignore[no-untyped-def]
    replayed = conversations(args)
    model = "unprofiled-model" if args.no_profile else "bench-model"
    mode = ClientMode(args.api, args.stream, model)
    turns: list[list[Replayed]] = []  # per conversation, each turn
    started = time.perf_counter()
    with httpx.Client(timeout=120) as client:
        for conversation in replayed:
            turns.append(replay(client, getattr(proxy, "base_urls", [proxy.base_url]), fake,
                                conversation, mode))
    elapsed = time.perf_counter() - started
    if hasattr(proxy, "settle"):  # processes: their last lines may still be in the pipes
        proxy.settle(sum(map(len, turns)))
    # per conversation, what the model received each turn (its last attempt)
    bodies = [[t.upstream[-1] if t.upstream else b"{}" for t in per] for per in turns]
    lines = proxy.requests()
    done = proxy.logs.events("compaction_completed")
    where = (f"{len(replayed)} recorded conversations ({sum(map(len, bodies))} turns)"
             if args.traces else f"a {args.messages}-message thread")
    print(f"{len(lines)} requests over {where} in {elapsed:.1f} s; "
          f"window {args.window:,} tokens; {len(done)} compactions; api {args.api}, stream "
          f"{args.stream}, dialect {args.dialect}, strategy {args.strategy}, trigger/keep "
          f"{args.trigger_ratio}/{args.keep_ratio}{', no profile' if args.no_profile else ''}; "
          f"{args.instances} instance(s), state {args.state}")
    if args.traces:
        report_replay(lines, bodies)
        report_anomalies(turns, by_conversation(lines, bodies), args, proxy.logs)
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
    trigger = args.trigger_ratio * args.window
    within = sum(e["tokens_after"] <= args.keep_ratio * args.window + e["summary_tokens"] + 0.23 * trigger
                 for e in done)
    print(f"projection after compaction: p50 {statistics.median(after):.1%} of the window, "
          f"max {max(after):.1%}; summary p50 {statistics.median(summary):.1%}; "
          f"{within}/{len(done)} within keep {args.keep_ratio:.0%} + summary + restore budget "
          "(23% of the trigger)")
    stable = total = checked = 0
    for per_thread, thread_lines in zip(bodies, by_conversation(lines, bodies)):
        pairs = stability(per_thread, thread_lines, args.api)
        stable, total, checked = stable + pairs[0], total + pairs[1], checked + pairs[2]
    print(f"prefix stability between compactions: {stable / total if total else 1.0:.1%} of "
          f"{total} consecutive requests extend the previous projection byte for byte (the "
          f"previous minus its protected tail: {checked / total if total else 0:.1f} messages "
          "on average)")


def replay(client: httpx.Client, base_urls: str | list[str], fake: FakeUpstream,
           conversation: Conversation, mode: ClientMode) -> list[Replayed]:
    """At every point where the model speaks next, send the history so far (turn k to
    `base_urls[k % len]`, one URL or several), scripting the recorded message as the model's
    answer; the history then continues with the answer received (with the recorded message as
    the model would have given it when the request failed, so the replay goes on)."""
    base_urls = [base_urls] if isinstance(base_urls, str) else base_urls
    history: list[dict] = []
    out = []
    for message in conversation.messages:
        if message["role"] != "assistant":
            history += [message] if mode.api == "chat" else responses_items(message)
            continue
        fake.script(Reply.repeating(message))
        before = len(fake.requests)
        base_url = base_urls[len(out) % len(base_urls)]
        sent = post_turn(client, base_url, conversation.thread, history, conversation.tools, mode)
        fake._script.clear()  # a turn that never reached the model must not answer the next one
        main = [r.body for r in fake.requests[before:] if not is_summarizer_request(r.json)]
        out.append(Replayed(sent, main))
        if sent.status == 200 and sent.answer and sent.error is None:
            history += sent.answer
        else:
            history += unreceived_answer(fake, message, mode)
    return out


def report_anomalies(turns: list[list[Replayed]], lines: list[list[dict]],
                     args: argparse.Namespace, logs) -> None:  # type: ignore[no-untyped-def]
    """Statuses, usage shown to the client, and the SPEC checks on what reached upstream."""
    units = PromptUnits()
    anomalies: list[str] = []
    usage_expected = args.stream == "usage" or args.api == "responses"
    for n, (per, per_lines) in enumerate(zip(turns, lines)):
        for k, (turn, line) in enumerate(zip(per, per_lines)):
            where = f"trace-{n} turn {k} ({len(turn.sent.history)} entries)"
            if turn.sent.status != 200 or turn.sent.error:
                anomalies.append(f"{where}: status {turn.sent.status} {turn.sent.error}")
                continue
            if args.stream != "off" and turn.sent.saw_usage != usage_expected:
                anomalies.append(f"{where}: usage shown: {turn.sent.saw_usage}")
            if len(turn.upstream) > 1:
                anomalies.append(f"{where}: {len(turn.upstream)} upstream attempts "
                                 f"(retried={line.get('retried')})")
            for body in turn.upstream[-1:]:
                for problem in check_turn(turn.sent, orjson.loads(body), line, args.api,
                                          args.window, units):
                    anomalies.append(f"{where}: {problem}")
    failures = Counter(f"{e.get('stage')}: {e.get('error')}" for e in logs.events("compaction_failed"))
    calls = Counter(e.get("summarizer_calls", 0) for e in logs.events("compaction_started"))
    refused = len(logs.events("summarizer_overflow"))
    print(f"  summarizer calls per compaction (as planned): {dict(sorted(calls.items()))}; "
          f"summaries re-planned after the summarizer refused one as too long: {refused}; "
          f"compaction_failed: {dict(failures) or 'none'}")
    print(f"  anomalies: {len(anomalies)}")
    # By kind (numbers blanked), so the ones past the first 40 printed are not lost.
    kinds = Counter(re.sub(r"\d[\d,.]*", "#", a.split("): ", 1)[-1])[:110] for a in anomalies)
    for kind, count in kinds.most_common():
        print(f"    {count:>5} x {kind}")
    for anomaly in anomalies[:40]:
        print(f"    {anomaly}")


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


def stability(bodies: list[bytes], lines: list[dict], api: str = "chat") -> tuple[int, int, int]:
    """(stable, compared, messages checked) over one thread's consecutive requests."""
    key = "messages" if api == "chat" else "input"
    stable = total = checked = 0
    for n in range(1, len(bodies)):
        if lines[n].get("compaction") == "compacted" or lines[n - 1].get("compaction") == "compacted":
            continue
        if lines[n]["status"] != 200 or lines[n - 1]["status"] != 200:
            continue  # a refused turn sent nothing upstream to compare
        previous = orjson.loads(bodies[n - 1]).get(key) or []
        current = orjson.loads(bodies[n]).get(key) or []
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
