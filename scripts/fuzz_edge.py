"""A long fuzz run of the HTTP edge: the cases of `tests/test_hostile_http_edge.py` and the
delta-parse agreement of `tests/test_reparse_hostile_turns.py`, for as long as it is given.

One proxy in front of the fake upstream and one in front of a scripted upstream run in this
process; the cases go round in batches of fresh random examples until the time is up. A case
that fails is printed with its falsifying example (hypothesis shrinks it first) and the run goes
on. Not part of the test suite.

    .venv/bin/python scripts/fuzz_edge.py [--minutes 10] [--batch 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from proxy.testing.fake_upstream import FakeUpstream  # noqa: E402
from tests import edge_checks  # noqa: E402
from tests.edge_inputs import (PATHS, header_lines, request_bodies, thread_turns,  # noqa: E402
                               upstream_answers)
from tests.harness import LoopThread, proxy_settings, start_proxy, stop_proxy  # noqa: E402
from tests.test_reparse_hostile_turns import (  # noqa: E402
    test_a_delta_parse_reads_what_a_whole_parse_reads as delta_parse_case)

_APIS = st.sampled_from(sorted(PATHS))


def cases(proxy, fake, scripted_proxy, upstream, batch: int) -> dict[str, Callable[[], None]]:
    run = settings(max_examples=batch, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck))

    @run
    @given(api=_APIS, data=st.data())
    def bodies(api, data):
        edge_checks.run_body(proxy, fake, api, data.draw(request_bodies(api)),
                             data.draw(st.sampled_from([None, "hostile"])))

    @run
    @given(api=_APIS, data=st.data(), n=st.integers(0, 10 ** 12))
    def turns(api, data, n):
        edge_checks.run_turns(proxy, fake, api, data.draw(thread_turns(api, turns=6)),
                              f"turns-{n}")

    @run
    @given(api=_APIS, lines=header_lines(), body=st.sampled_from(
        [b'{"model":"gpt-4o","%s":[{"role":"user","content":"Hi"}]}', b"\xef\xbb\xbf{}"]))
    def headers(api, lines, body):
        edge_checks.run_header_lines(proxy, api, lines, body.replace(b"%s", PATHS[api][1].encode()))

    @run
    @given(api=_APIS, answer=upstream_answers(), stream=st.booleans())
    def answers(api, answer, stream):
        edge_checks.run_answer(scripted_proxy, upstream, api, answer, stream)

    return {"bodies": bodies, "turns": turns, "headers": headers, "answers": answers,
            "delta_parse": delta_parse_case}  # its own 80 examples a batch


def _positive_minutes(text: str) -> float:
    # No time ran no case and exited 0: a run that checked nothing must not look like a pass.
    try:
        minutes = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not minutes > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return minutes


def _batch_size(text: str) -> int:
    try:
        batch = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if batch < 1:  # hypothesis refuses max_examples=0, after both proxies have started
        raise argparse.ArgumentTypeError(f"must be at least 1, got {batch}")
    return batch


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=_positive_minutes, default=10,
                        help="how long to fuzz, in minutes (default 10)")
    parser.add_argument("--batch", type=_batch_size, default=100,
                        help="fresh examples per case in each round (default 100)")
    args = parser.parse_args()
    loop = LoopThread()
    fake = FakeUpstream()
    upstream = edge_checks.ScriptedUpstream()
    loop.run(fake.start())
    loop.run(upstream.start())
    with tempfile.TemporaryDirectory() as state:
        proxy = loop.run(start_proxy(proxy_settings(fake.url, f"{state}/a")))
        scripted = loop.run(start_proxy(proxy_settings(upstream.url, f"{state}/b"), proxy.logs))
        deadline = time.monotonic() + args.minutes * 60
        runs: dict[str, int] = {}
        failures: dict[str, int] = {}
        try:
            while time.monotonic() < deadline:
                for name, case in cases(proxy, fake, scripted, upstream, args.batch).items():
                    if time.monotonic() >= deadline:
                        break
                    runs[name] = runs.get(name, 0) + 1
                    try:
                        case()
                    except Exception:  # noqa: BLE001 - report and go on fuzzing
                        failures[name] = failures.get(name, 0) + 1
                        print(f"--- {name} failed:", file=sys.stderr)
                        traceback.print_exc()
                    print(f"{time.strftime('%H:%M:%S')} {name} batch {runs[name]} done "
                          f"({failures.get(name, 0)} failed so far)", flush=True)
        finally:
            loop.run(stop_proxy(scripted))
            loop.run(stop_proxy(proxy))
            loop.run(upstream.stop())
            loop.run(fake.stop())
            loop.close()
    for name, count in runs.items():
        print(f"{name}: {count} batches, {failures.get(name, 0)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
