"""Benchmark of the cheap cascade on a realistic 300-message coding-agent session.

Reports, for the last request of the session: tokens outside the protected window before and
after each stage, whether every file path, query and line range the exploration touched is
still in the projection, and the warm time per stage; then replays the session request by
request and reports the share of requests whose projection is a byte-prefix extension of the
previous one (what keeps a provider's prompt cache hitting).

    .venv/bin/python scripts/bench_cascade.py [--messages 300] [--seed 1] [--api chat]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import orjson

from proxy.conversation import Api, Entries, content_text, entries_from, serialize
from proxy.core.cascade import STAGES, CascadeContext, CascadeResult, Stage, run_cascade
from proxy.identity import Identities
from proxy.settings import DEFAULT_EXPLORATION_TOOLS, CompactionSettings
from proxy.testing.sessions import coding_session
from proxy.tokens.encoding import OFFLINE, load_tokenizer
from proxy.tokens.estimate import TokenEstimator

PROFILE_MAX_INPUT = 128_000
HOUR = 3600.0
RANGE_KEYS = ("path", "pattern", "query", "start_line", "end_line")


def main() -> None:
    args = _arguments()
    api = Api(args.api)
    session = coding_session(args.messages, args.seed, args.api)
    entries = entries_from(api, session, [orjson.dumps(m) for m in session])
    estimator = TokenEstimator(load_tokenizer(OFFLINE))
    settings = CompactionSettings()
    keep_tokens = int(PROFILE_MAX_INPUT * settings.keep_ratio)
    print(f"session: {len(entries)} {api.value} elements, seed {args.seed}, "
          f"{sum(estimator.sizes(entries)):,} tokens (cl100k_base), "
          f"{sum(estimator.sizes(entries)) / len(entries):.0f} per element")
    for label, tokens, messages in ((f"profile window: {keep_tokens:,} tokens", keep_tokens, None),
                                    ("no profile: last 6 messages", None, 6)):
        print(f"\n== {label}")
        context = CascadeContext(settings, measure=estimator.entry_tokens, sizes=estimator.sizes(entries),
                                 keep_tokens=tokens, keep_messages=messages, now=10 * HOUR,
                                 last_activity=0.0)
        savings(entries, context, estimator)
        timing(entries, context, args.repeat)
        replay(api, session, context, estimator)
        if tokens is not None:
            print(f"  with window_step={tokens:,} (the start snaps back to every {tokens:,} tokens):")
            savings(entries, replace(context, window_step=tokens), estimator)
            replay(api, session, replace(context, window_step=tokens), estimator)


def savings(entries: Entries, context: CascadeContext, estimator: TokenEstimator) -> None:
    for idle, note in ((False, "busy thread"), (True, "after 10 h idle: microcompact runs")):
        ctx = context if idle else replace(context, now=60.0)
        result = run_cascade(entries, ctx)
        tail = len(result.entries) - result.window_start
        outside = sum(estimator.sizes(entries[:len(entries) - tail]))
        print(f"  {note}: window = last {tail} elements; outside it {outside:,} tokens")
        remaining = outside
        for report in result.reports:
            remaining -= report.tokens_saved
            print(f"    {report.name:13s} changed {report.changed:4d}  saved {report.tokens_saved:7,}"
                  f"  -> {remaining:7,} outside")
        print(f"    removed {1 - remaining / outside:.1%} of the tokens outside the window; "
              f"exploration kept: {exploration_kept(entries, result)}")


def exploration_kept(entries: Entries, result: CascadeResult) -> str:
    """Whether each path, query and line range of the client's exploration calls is still in
    the projection, verbatim in a kept call or in a collapse record."""
    text = "\n".join(content_text(e) for e in result.entries if e.source is None)
    kept_calls = {c.id: c.arguments for e in result.entries for c in e.calls}
    checked = missing = 0
    for entry in entries:
        for call in entry.calls:
            if call.name not in DEFAULT_EXPLORATION_TOOLS:
                continue
            args = json.loads(call.arguments)
            for key in RANGE_KEYS:
                if key not in args:
                    continue
                checked += 1
                fragment = orjson.dumps({key: args[key]}).decode()[1:-1]
                if fragment not in text and kept_calls.get(call.id) != call.arguments:
                    missing += 1
    return f"{checked - missing}/{checked} values" + ("" if not missing else " (MISSING SOME)")


def timing(entries: Entries, context: CascadeContext, repeat: int) -> None:
    spent: dict[str, list[float]] = {}
    stages = tuple(Stage(s.name, _timed(s.run, spent.setdefault(s.name, [])), s.enabled, s.needs_window)
                   for s in STAGES)
    totals = []
    for _ in range(repeat):
        start = time.perf_counter()
        run_cascade(entries, context, stages=stages)
        totals.append(time.perf_counter() - start)
    warm = slice(3, None)  # the first runs fill the token counter's cache
    # A stage that never ran (a session all inside the protected window) has no time.
    parts = {name: statistics.median(t[warm]) for name, t in spent.items() if t[warm]}
    rest = statistics.median(totals[warm]) - sum(parts.values())
    cells = "  ".join(f"{name} {ms * 1000:.2f}" for name, ms in parts.items())
    print(f"  warm time per request (median of {repeat - 3}, ms): {cells}  "
          f"window+sanitize {rest * 1000:.2f}  = total {statistics.median(totals[warm]) * 1000:.2f}"
          f" (best {min(totals[warm]) * 1000:.2f})")


def _timed(run: Callable[..., Any], into: list[float]) -> Callable[..., Any]:
    def timed(*args: Any) -> Any:
        start = time.perf_counter()
        result = run(*args)
        into.append(time.perf_counter() - start)
        return result
    return timed


def replay(api: Api, session: Sequence[dict[str, Any]], context: CascadeContext,
           estimator: TokenEstimator) -> None:
    """Each request: the session up to a point where a client would call the model."""
    points = [n for n in range(2, len(session) + 1) if _request_point(session, n)]
    identities = Identities()
    for gap, note in ((None, "no idle gap"), (len(points) // 2, "one 7 h idle gap mid-session")):
        previous: bytes | None = None
        extended = 0
        mark = None
        clock = 0.0
        for k, n in enumerate(points):
            last, clock = clock, clock + (7 * HOUR if k == gap else 30.0)
            entries = entries_from(api, session[:n], [orjson.dumps(m) for m in session[:n]])
            ctx = replace(context, sizes=estimator.sizes(entries), now=clock, last_activity=last,
                          message_ids=identities.ids(entries), mark=mark)
            result = run_cascade(entries, ctx)
            mark = result.mark
            body = serialize(result.entries)
            if previous is not None and (body == previous or body.startswith(previous[:-1] + b",")):
                extended += 1
            previous = body
        share = extended / (len(points) - 1)
        print(f"  replay, {note}: {len(points)} requests, {extended}/{len(points) - 1} = {share:.1%} "
              "extend the previous projection byte for byte")


def _request_point(session: Sequence[dict[str, Any]], n: int) -> bool:
    def is_result(m: dict[str, Any]) -> bool:
        return m.get("role") == "tool" or str(m.get("type", "")).endswith("_output")
    last = session[n - 1]
    following = session[n] if n < len(session) else None
    return last.get("role") == "user" or (is_result(last) and (following is None or not is_result(following)))


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--api", choices=("chat", "responses"), default="chat")
    parser.add_argument("--repeat", type=int, default=40)
    return parser.parse_args()


if __name__ == "__main__":
    main()
