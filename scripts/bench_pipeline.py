"""Per-request CPU cost of reading a long agent thread and estimating its size (issue 3).

A synthetic coding-agent thread (`proxy.testing.sessions`, 400 messages) is sent as a chat
request body. Cold: first sight, every cache empty. Warm: the same thread plus the assistant
answer and one new user message, caches filled by the previous request, the previous turn's
usage anchor in hand. Each run measures CPU time per step: JSON parse, `locate_array`,
`entries_from`, identities, the token estimate, the anchor check. Also prints the estimate
against the reference prompt count (`proxy.testing.reference_tokens`, exact cl100k_base).

    .venv/bin/python scripts/bench_pipeline.py [--messages 400] [--runs 200] [--profile warm]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.anchors import context_bytes, estimate, make_anchor, response_entries
from proxy.conversation import Api, Entries, entries_from, entry_from
from proxy.identity import Identities
from proxy.jsonspan import locate_array
from proxy.records import Anchor
from proxy.settings import TokenSettings
from proxy.testing.reference_tokens import chat_prompt_tokens
from proxy.testing.sessions import coding_session
from proxy.tokens.encoding import tokenizer_for
from proxy.tokens.estimate import TokenEstimator
from proxy.usage import normalize

MODEL = "gpt-4o"
STEPS = ("parse", "locate", "entries", "identities", "estimate", "anchor")
ANSWER = {"role": "assistant", "content": "I read the files; next I will run the failing test."}
TOOLS = [{"type": "function", "function": {"name": name, "description": f"The {name} tool.",
                                           "parameters": {"type": "object", "properties": {
                                               "path": {"type": "string", "description": "A path."}}}}}
         for name in ("read_file", "grep", "glob", "list_dir", "edit_file", "write_file", "bash")]


@dataclass
class Caches:
    identities: Identities
    estimator: TokenEstimator
    anchors: list[Anchor] = field(default_factory=list)
    reuse: bool = False  # the proposed variant: keep the thread's previous entries
    previous: Entries = ()


def fresh_caches() -> Caches:
    return Caches(Identities(), TokenEstimator(tokenizer_for(MODEL), TokenSettings()))


def request(body: bytes, caches: Caches,
            clock: Callable[[], int]) -> tuple[dict[str, int], int, Anchor | None]:
    """One request's pipeline front half: CPU ns per step, the estimate, the anchor used."""
    marks = [clock()]
    parsed = orjson.loads(body)
    marks.append(clock())
    spans = locate_array(body, "messages", parsed["messages"])
    marks.append(clock())
    entries = read_entries(parsed["messages"], spans.elements if spans else None, caches)
    marks.append(clock())
    caches.identities.ids(entries)
    marks.append(clock())
    sizes = caches.estimator.sizes(entries)
    total = caches.estimator.conservative_total(entries, parsed.get("tools"), sizes=sizes)
    marks.append(clock())
    context = context_bytes(parsed.get("tools"), None, MODEL)
    tokens, anchor, _ = estimate(entries, sizes, context, caches.anchors, total,
                                 caches.identities.digest, caches.estimator.margin)
    marks.append(clock())
    return {step: marks[i + 1] - marks[i] for i, step in enumerate(STEPS)}, tokens, anchor


def read_entries(elements: list[Any], sources: tuple[bytes, ...] | None, caches: Caches) -> Entries:
    """`entries_from`; in the proposed variant, unchanged elements keep last request's entry."""
    if not caches.reuse or sources is None:
        return entries_from(Api.CHAT, elements, sources)
    previous = caches.previous
    entries = tuple(previous[i] if i < len(previous) and previous[i].source == source
                    else entry_from(Api.CHAT, element, source)
                    for i, (element, source) in enumerate(zip(elements, sources, strict=True)))
    caches.previous = entries
    return entries


def body_of(messages: list[dict[str, Any]]) -> bytes:
    return orjson.dumps({"model": MODEL, "messages": messages, "tools": TOOLS, "stream": True})


def anchor_after(messages: list[dict[str, Any]], caches: Caches) -> Anchor:
    """The anchor the previous turn left: its usage is what the reference count says."""
    entries = entries_from(Api.CHAT, messages, [orjson.dumps(m) for m in messages])
    prompt = chat_prompt_tokens({"messages": messages, "tools": TOOLS})
    usage = normalize({"prompt_tokens": prompt, "completion_tokens": 20}, Api.CHAT)
    assert usage is not None
    return make_anchor(entries, context_bytes(TOOLS, None, MODEL), response_entries(Api.CHAT, ANSWER),
                       usage, caches.identities.digest)


def warm_thread(base: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    return [*base, ANSWER, {"role": "user", "content": f"Now also handle case {n}: the retry path."}]


def warm_runs(base: list[dict[str, Any]], runs: int,
              reuse: bool) -> tuple[list[dict[str, int]], int, int]:
    """Samples, the last estimate, and how many requests used the anchor."""
    caches = fresh_caches()
    caches.reuse = reuse
    request(body_of(base), caches, time.process_time_ns)
    caches.anchors = [anchor_after(base, caches)]
    samples, tokens, anchored = [], 0, 0
    for n in range(runs):
        sample, tokens, anchor = request(body_of(warm_thread(base, n)), caches, time.process_time_ns)
        samples.append(sample)
        anchored += anchor is not None
        caches.previous = caches.previous[:len(base)]  # the next request is this thread + 1 again
    return samples, tokens, anchored


def run(messages: int, runs: int) -> dict[str, Any]:
    base = coding_session(messages, seed=1)
    base_body = body_of(base)
    cold = [request(base_body, fresh_caches(), time.process_time_ns)[0]
            for _ in range(max(10, runs // 10))]
    warm, tokens, anchored = warm_runs(base, runs, reuse=False)
    reused = warm_runs(base, runs, reuse=True)[0]
    final = warm_thread(base, runs - 1)
    return {"base": base, "body": base_body, "cold": cold, "warm": warm, "reused": reused,
            "tokens": tokens, "anchored": anchored, "tokenizer": tokenizer_for(MODEL),
            "conservative": fresh_caches().estimator.conservative_total(
                entries_from(Api.CHAT, final), TOOLS),
            "reference": chat_prompt_tokens({"messages": final, "tools": TOOLS})}


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1e6


def table(label: str, samples: list[dict[str, int]]) -> list[str]:
    rows = [f"{label} ({len(samples)} runs)       p50 ms   p90 ms"]
    for step in STEPS:
        column = [s[step] for s in samples]
        rows.append(f"  {step:<22}{percentile(column, 0.5):8.2f} {percentile(column, 0.9):8.2f}")
    beyond = [sum(s[k] for k in STEPS if k != "parse") for s in samples]
    whole = [sum(s.values()) for s in samples]
    rows.append(f"  {'total beyond parse':<22}{percentile(beyond, 0.5):8.2f} {percentile(beyond, 0.9):8.2f}")
    rows.append(f"  {'total with parse':<22}{percentile(whole, 0.5):8.2f} {percentile(whole, 0.9):8.2f}")
    return rows


def report(result: dict[str, Any]) -> str:
    tokenizer = result["tokenizer"]
    reference, conservative, tokens = result["reference"], result["conservative"], result["tokens"]
    lines = [f"thread: {len(result['base'])} messages, {len(result['body']) / 1024:.0f} KB body, "
             f"tokenizer {tokenizer.describe()} for {MODEL}", ""]
    lines += table("cold: first sight", result["cold"]) + [""]
    lines += table("warm: +1 message", result["warm"]) + [""]
    lines += table("warm, reusing entries", result["reused"]) + [""]
    lines.append(f"reference prompt tokens     {reference:>9,}")
    lines.append(f"conservative estimate       {conservative:>9,}  ({conservative / reference - 1:+.1%})")
    lines.append(f"anchored estimate (warm)    {tokens:>9,}  ({tokens / reference - 1:+.1%}), "
                 f"anchor used on {result['anchored']}/{len(result['warm'])} warm requests")
    return "\n".join(lines)


def profile(which: str, messages: int) -> None:
    base = coding_session(messages, seed=1)
    caches = fresh_caches()
    if which == "warm":
        request(body_of(base), caches, time.process_time_ns)
        caches.anchors = [anchor_after(base, caches)]
    bodies = [body_of(warm_thread(base, n)) for n in range(50)]
    profiler = cProfile.Profile()
    profiler.enable()
    for body in bodies:
        request(body, caches if which == "warm" else fresh_caches(), time.process_time_ns)
    profiler.disable()
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


def pipeline_runs(base: list[dict[str, Any]], runs: int) -> dict[str, list[float]]:
    """The whole `Pipeline.prepare` as the server runs it: parse, thread state, entries (reusing
    the thread's last ones), the cheap cascade, the estimate, the outgoing body. CPU ms.

    Cold: a new thread each time, every cache empty. Warm: one thread growing by an answer and
    a user message per request, as an agent's does."""
    import asyncio
    import tempfile

    from proxy.server.pipeline import Pipeline
    from proxy.server.request_line import RequestLine
    from proxy.settings import parse_settings
    from proxy.threads import ThreadIdentity

    class Quiet:
        def info(self, *args: Any, **kwargs: Any) -> None: ...
        warning = info

    async def measure() -> dict[str, list[float]]:
        out: dict[str, list[float]] = {"cold": [], "warm": []}
        with tempfile.TemporaryDirectory() as state:
            settings = parse_settings({"upstreams": {"u": {"base_url": "http://127.0.0.1:9/v1"}},
                                       "models": {MODEL: {"max_input_tokens": 1_000_000}},
                                       "state": {"path": state}}, {})
            upstream = settings.upstreams["u"]
            for n in range(max(5, runs // 20)):
                pipeline = Pipeline(settings, log=Quiet())
                await pipeline.start()
                out["cold"].append(await _timed(pipeline, body_of(base), f"cold-{n}", upstream))
                await pipeline.stop()
            pipeline = Pipeline(settings, log=Quiet())
            await pipeline.start()
            messages = list(base)
            await _timed(pipeline, body_of(messages), "warm", upstream)
            for n in range(runs):
                messages = [*messages, ANSWER, {"role": "user", "content": f"And case {n}?"}]
                out["warm"].append(await _timed(pipeline, body_of(messages), "warm", upstream))
            await pipeline.stop()
        return out

    async def _timed(pipeline: Any, body: bytes, thread: str, upstream: Any) -> float:
        from proxy.conversation import Api
        identity = ThreadIdentity(thread, "header", "t")
        started = time.process_time_ns()
        inbound = pipeline.parse(Api.CHAT, body, identity)  # as the server does
        await pipeline.prepare(inbound, identity, upstream, RequestLine(Quiet()), {})
        return (time.process_time_ns() - started) / 1e6

    return asyncio.run(measure())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=400)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--profile", choices=("cold", "warm"))
    args = parser.parse_args()
    if args.profile:
        profile(args.profile, args.messages)
        return
    print(report(run(args.messages, args.runs)))
    whole = pipeline_runs(coding_session(args.messages, seed=1), args.runs)
    print("\nthe whole Pipeline.prepare (parse, state, entries, cascade, estimate, body), CPU ms")
    for label, samples in whole.items():
        ordered = sorted(samples)
        print(f"  {label:<6} p50 {ordered[len(ordered) // 2]:7.2f}   p90 "
              f"{ordered[int(len(ordered) * 0.9)]:7.2f}   ({len(ordered)} runs)")


if __name__ == "__main__":
    main()
