"""What one request costs the proxy in CPU instructions, next to the raw forwarder: a count, not a time.

`bench_overhead.py` measures throughput, which on these shared 2-core machines moves by 10%
from run to run. This counts the instructions each server executes per request under valgrind
(callgrind), which is the same whatever else the machine is doing, so a change of a few
percent shows. The servers run one at a time under valgrind: the raw forwarder and the proxy
(and `--baseline DIR`, the proxy of another checkout); the load (small chat requests from 16
threads at concurrency 16, as in bench_overhead's `small` scenario) comes from this process,
against the canned upstream. Counting starts after a warm-up and covers every thread of the
server (the proxy's store writer too). System calls are not counted: both servers make the
same ones per request. The proxy logs at `info`, as shipped: its line per request is counted.

    .venv/bin/python scripts/bench_instructions.py [--requests 1000]
        [--scenario small|stream|stream400|responses400|big] [--baseline DIR]
        [--log-level info|warning]

Needs valgrind (`callgrind_control` comes with it). About a minute per server.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

# The scripts directory is not a package: its neighbour is imported by path.
import bench_overhead as overhead

WARMUP = 200
STARTUP_S = 300  # everything runs ~50 times slower under valgrind: loading tiktoken too


def count(command: list[str], ready: str, url: str, body: bytes, stream: bool, requests: int,
          out_dir: Path, root: Path, path: str = "/chat/completions") -> int:
    """Instructions the server started by `command` executed for `requests` requests."""
    out = out_dir / "callgrind.out"
    valgrind = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}.%p"]
    env = {**os.environ, "PYTHONPATH": str(root)}
    server = subprocess.Popen(valgrind + command, env=env, cwd=root, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        overhead._wait_ready(ready, timeout=STARTUP_S)
        asyncio.run(overhead.drive(url, body, stream, WARMUP, 16, 16, path))
        _control("-z", server.pid)  # zero the counters: startup and warm-up are not counted
        result = asyncio.run(overhead.drive(url, body, stream, requests, 16, 16, path))
        _control("-d", server.pid)
        if result.errors:
            raise RuntimeError(f"{result.errors} requests failed")
    finally:
        server.terminate()
        server.wait(60)
    dumps = glob.glob(f"{out}.{server.pid}.1*")  # the dump after the load, not the final one
    if not dumps:
        raise RuntimeError("callgrind wrote no dump")
    return sum(_total(Path(dump)) for dump in dumps)


def _control(flag: str, pid: int) -> None:
    subprocess.run(["callgrind_control", flag, str(pid)], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def _total(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"{dump}: no totals line")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--scenario", default="small",
                        choices=("small", "stream", "stream400", "responses400", "big"))
    parser.add_argument("--log-level", default="info",
                        help="the proxies' logging.level (info, as shipped: a line per request)")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout whose proxy is counted too, as target `base`")
    args = parser.parse_args()
    overhead.stop_cleanly_on_sigterm()
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind is not installed (apt-get install valgrind)")
    body = overhead.scenario_bodies()[args.scenario]
    stream = args.scenario in overhead.STREAMED
    with tempfile.TemporaryDirectory() as work:
        work_dir = Path(work)
        up_port = overhead.free_port()
        upstream = f"http://127.0.0.1:{up_port}/v1"
        canned = overhead._spawn([overhead.__file__, "--serve-canned", str(up_port)])
        try:
            overhead._wait_ready(upstream + "/chat/completions")
            counts = {}
            for target, root in _targets(args.baseline):
                port = overhead.free_port()
                out_dir = work_dir / target
                out_dir.mkdir()
                if target == "raw":
                    command = [sys.executable, overhead.__file__, "--serve-raw", str(port), upstream]
                    ready = f"http://127.0.0.1:{port}/v1/chat/completions"
                else:
                    config = _proxy_config(upstream, port, out_dir, args.log_level)
                    command = [sys.executable, "-m", "proxy", "serve", "--config", str(config)]
                    ready = f"http://127.0.0.1:{port}/healthz"
                total = count(command, ready, f"http://127.0.0.1:{port}/v1", body, stream,
                              args.requests, out_dir, root, overhead.path_of(args.scenario))
                counts[target] = total / args.requests
                print(f"{target:<6} {counts[target] / 1000:10.1f} k instructions per request",
                      flush=True)
        finally:
            canned.terminate()
            canned.wait(15)
    print(f"ratio proxy/raw {counts['proxy'] / counts['raw']:.2f}", end="")
    if "base" in counts:
        print(f"; base/raw {counts['base'] / counts['raw']:.2f}; "
              f"proxy/base {counts['proxy'] / counts['base']:.2f}", end="")
    print(f"  ({args.scenario}, {args.requests} requests at concurrency 16)")


def _targets(baseline: Path | None) -> list[tuple[str, Path]]:
    targets = [("raw", ROOT), ("proxy", ROOT)]
    if baseline is not None:
        targets.append(("base", baseline.resolve()))
    return targets


def _proxy_config(upstream: str, port: int, home: Path, log_level: str) -> Path:
    config = home / "proxy.yaml"
    config.write_text(overhead.proxy_config(upstream, port, home, log_level))
    return config


if __name__ == "__main__":
    main()
