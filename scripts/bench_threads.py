"""The operator's thread listing at scale, and what keeping it fast costs the write path.

Builds a state of `--threads` threads with `--anchors` usage anchors each (written through
`StateDb`, as the proxy writes them: one batch of one anchor per thread at a time), then reports
- `list_threads(100)`: the median of `--rounds` calls, on a warm page cache;
- one batch of anchors for `--batch` known threads (the queued writes of a busy proxy): the
  median time per anchor over `--rounds` batches.

    .venv/bin/python scripts/bench_threads.py [--threads 10000] [--anchors 20]

`--code DIR` runs it against another checkout's `proxy` package (a `git archive` of an older
commit unpacked there), to compare two versions in the same run on the same machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def build(db: Any, anchor_write: Any, key_type: Any, anchor_type: Any, threads: int,
          anchors: int) -> list[Any]:
    keys = [key_type(f"tenant-{n % 7}", f"thread-{n}") for n in range(threads)]
    db.write(db.touch_many, [(key, 1_000.0 + n, 100 + n) for n, key in enumerate(keys)])
    for round_ in range(anchors):
        db.write_batch([anchor_write(db, key, _anchor(anchor_type, n, round_, threads))
                        for n, key in enumerate(keys)])
    return keys


def _anchor(anchor_type: Any, n: int, round_: int, threads: int) -> Any:
    # Every tenth thread's answers come later than its persisted touch (touches held back).
    at = 1_000.0 + n + (threads if n % 10 == 0 else 0) + round_ * 0.001
    return anchor_type((f"msg-{n}-{round_}",), 2 * round_ + 3, f"prefix-{n}-{round_}",
                       1_000 + round_, 50, model="gpt-4o", created_at=at)


def median_ms(fn: Any, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=10_000)
    parser.add_argument("--anchors", type=int, default=20, help="anchors written per thread")
    parser.add_argument("--batch", type=int, default=64, help="threads in a write batch")
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--code", type=Path, default=Path(__file__).resolve().parents[1],
                        help="the checkout whose `proxy` package to measure")
    args = parser.parse_args()
    sys.path.insert(0, str(args.code.resolve()))
    from proxy.records import Anchor, ThreadKey
    from proxy.store.sqlite_db import AnchorWrite, StateDb

    with tempfile.TemporaryDirectory() as tmp:
        db = StateDb.connect(Path(tmp))
        try:
            started = time.perf_counter()
            keys = build(db, AnchorWrite, ThreadKey, Anchor, args.threads, args.anchors)
            built_s = time.perf_counter() - started
            listed = db.list_threads(100)
            listing = median_ms(lambda: db.list_threads(100), args.rounds)
            batches = iter(range(10**9))

            def one_batch() -> None:
                round_ = args.anchors + next(batches)
                db.write_batch([AnchorWrite(db, key, _anchor(Anchor, n, round_, args.threads))
                                for n, key in enumerate(keys[:args.batch])])
            per_anchor_us = median_ms(one_batch, args.rounds) * 1000 / args.batch
        finally:
            db.close()
    print(f"code: {args.code}")
    print(f"{args.threads} threads, {args.anchors} anchors each written (built in {built_s:.1f} s)")
    print(f"list_threads(100): {listing:.2f} ms (median of {args.rounds}); "
          f"first: {listed[0].thread} at {listed[0].last_activity}")
    print(f"a batch of {args.batch} anchors of known threads: {per_anchor_us:.1f} us per anchor")


if __name__ == "__main__":
    main()
