"""The proxy's memory under load: bounded caches, no growth over time.

Starts a canned upstream and the proxy (default config, SQLite state in a temporary folder),
then reads the proxy's resident set size (RSS, from /proc) after:
  - 10,000 and 20,000 small requests over 64 threads (no growth between the two is the target),
  - 1,000 agent threads of 50 distinct messages each, with tool calls (each thread sent as it
    grows, 5 turns).

    .venv/bin/python scripts/bench_memory.py [--requests 10000] [--threads 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import bench_overhead  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def small_requests(url: str, count: int, concurrency: int = 16) -> None:
    body = orjson.dumps({"model": "bench-small", "messages": [{"role": "user", "content": "hi"}]})
    queue = list(range(count))
    async with aiohttp.ClientSession() as session:
        async def worker() -> None:
            while queue:
                n = queue.pop()
                async with session.post(f"{url}/chat/completions", data=body, headers={
                        "Content-Type": "application/json", "x-thread-id": f"small-{n % 64}"}) as r:
                    await r.read()
        await asyncio.gather(*(worker() for _ in range(concurrency)))


def thread_messages(n: int, turns: int) -> list[dict[str, object]]:
    """An agent's thread: a system prompt, then `turns` steps of a request, a tool call, its
    result and an answer (4 messages each). Tool traffic sends it the whole way through the
    pipeline, as a long agent task goes: a plain chat this small would take the short way and
    leave nothing in the proxy's memory."""
    messages: list[dict[str, object]] = [{"role": "system", "content": f"Agent for project {n}."}]
    for turn in range(turns):
        call = f"call_{n}_{turn}"
        messages += [
            {"role": "user", "content": f"Thread {n}, step {turn}: " + "detail " * 60},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": call, "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "src/f{turn}.py"}}'}}]},
            {"role": "tool", "tool_call_id": call, "content": f"# file {turn}\n" + "x = 1\n" * 30},
            {"role": "assistant", "content": f"Done step {turn} of {n}. " + "ok " * 40}]
    return messages


async def many_threads(url: str, threads: int, concurrency: int = 16) -> None:
    """Each thread sent as it grows: 2, 5, 7, 10 and 12 steps, then a last user message (50
    messages at the end)."""
    jobs = [(n, k) for k in (2, 5, 7, 10, 12) for n in range(threads)]
    async with aiohttp.ClientSession() as session:
        async def worker() -> None:
            while jobs:
                n, k = jobs.pop(0)
                body = orjson.dumps({"model": "bench-small", "messages": thread_messages(n, k) + [
                    {"role": "user", "content": "next"}]})
                async with session.post(f"{url}/chat/completions", data=body, headers={
                        "Content-Type": "application/json", "x-thread-id": f"t-{n}"}) as r:
                    await r.read()
        await asyncio.gather(*(worker() for _ in range(concurrency)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1_000)
    args = parser.parse_args()
    bench_overhead.stop_cleanly_on_sigterm()
    with tempfile.TemporaryDirectory() as state_dir:
        servers = bench_overhead.start_servers("canned", state_dir)
        pid, url = servers.proxy_pid, servers.urls["proxy"]
        try:
            print(f"proxy RSS at start: {rss_mb(pid):.1f} MB")
            asyncio.run(small_requests(url, args.requests))
            first = rss_mb(pid)
            print(f"after {args.requests:,} requests: {first:.1f} MB")
            asyncio.run(small_requests(url, args.requests))
            second = rss_mb(pid)
            print(f"after {2 * args.requests:,} requests: {second:.1f} MB "
                  f"(growth {second - first:+.1f} MB)")
            asyncio.run(many_threads(url, args.threads))
            print(f"after {args.threads:,} threads of 50 messages: {rss_mb(pid):.1f} MB")
        finally:
            servers.stop()


if __name__ == "__main__":
    main()
