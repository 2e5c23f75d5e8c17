"""Run the fake upstream on its own, for demos and benchmarks.

    python -m proxy.testing --port 9000 --limit 'small-*=8000' --dialect openai
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from collections.abc import Sequence

from proxy.testing.dialects import DIALECTS
from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.overflow import OVERFLOW_STYLES
from proxy.testing.usage import USAGE_STYLES


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m proxy.testing", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--limit", action="append", default=[], metavar="GLOB=TOKENS",
                        help="max prompt tokens for models matching GLOB (repeatable)")
    parser.add_argument("--dialect", choices=list(DIALECTS), default="openai")
    parser.add_argument("--usage-style", choices=USAGE_STYLES, default="openai")
    parser.add_argument("--overflow-style", choices=OVERFLOW_STYLES, default="openai")
    parser.add_argument("--api-key", default=None, help="require this bearer key")
    parser.add_argument("--always-reason", action="store_true", help="every reply reasons")
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between SSE frames")
    parser.add_argument("--window-counts-completion", action="store_true",
                        help="a --limit is a total window: max_tokens must fit in it too")
    return parser.parse_args(argv)


def parse_limits(specs: Sequence[str]) -> dict[str, int]:
    limits = {}
    for spec in specs:
        pattern, sep, tokens = spec.rpartition("=")
        if not sep or not pattern or not tokens.isdigit():
            raise SystemExit(f"--limit expects GLOB=TOKENS, got {spec!r}")
        limits[pattern] = int(tokens)
    return limits


async def serve(args: argparse.Namespace) -> None:
    fake = FakeUpstream(limits=parse_limits(args.limit), dialect=args.dialect,
                        usage_style=args.usage_style, overflow_style=args.overflow_style,
                        api_key=args.api_key, always_reason=args.always_reason,
                        chunk_delay=args.chunk_delay,
                        window_counts_completion=args.window_counts_completion)
    await fake.start(args.host, args.port)
    print(f"fake upstream ({args.dialect}) listening on {fake.url}", file=sys.stderr, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        await stop.wait()
    finally:
        await fake.stop()


def main(argv: Sequence[str] | None = None) -> None:
    asyncio.run(serve(parse_args(argv)))


if __name__ == "__main__":
    main()
