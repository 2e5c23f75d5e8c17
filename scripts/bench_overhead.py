"""What the proxy costs on the wire: throughput, latency and streaming TTFB, side by side.

Three targets get the same load in the same run, interleaved round by round:
  direct  the upstream itself (the fake upstream, or a canned one with --upstream canned)
  raw     a minimal aiohttp forwarder: read the body, post it, relay the answer (the Python floor)
  proxy   compaction-proxy with its default pipeline (thread state on SQLite, estimates, anchors)
Each runs in its own process; the load comes from this one. Scenarios: a small request, a
streaming request (5 content chunks), a long streaming answer (`stream400`: 400 chunks, one
write each, as fast as they go: a forwarder that falls behind reads many at once), the same
answer paced as a model writes it (`paced400`: an event every millisecond, so each comes in a
read of its own; concurrency 16 only, its req/s is the pace's), a 200-message ~400 KB
request, and a Responses API stream of 400 text deltas (`responses400`); at concurrency 1
and 16. Printed: req/s, p50/p99 latency, streaming time-to-first-byte, the CPU time the
forwarding process (raw, proxy, base) spent per request, that of its event loop's thread
alone and how busy that thread was, and the ratios proxy/raw and proxy/direct (throughput
proxy/raw also round by round: its spread is how much the machine's load moved it). CPU per
request moves much less with the machine's load than req/s does: when the two disagree, the CPU
figure says what the code costs, req/s what this machine made of it.

At concurrency 16 the proxy's one event loop is near saturation. When the raw forwarder's is
too (`loop busy` near 1 for raw as well), throughput proxy/raw follows the loop CPU ratio.
When the raw forwarder's loop is well below 1, the load generator and the upstream, which
share the machine's two cores with the servers, bound it, and the throughput ratio comes out
higher than the loop CPU ratio.

    .venv/bin/python scripts/bench_overhead.py [--requests 400] [--rounds 3] [--upstream fake|canned]
        [--baseline DIR] [--log-level info|warning] [--state sqlite|redis]

`--state redis` puts the proxies' state on a Redis server the script starts (redis-server must
be installed): what several instances sharing one state cost each request.

The proxies log at `info` unless told otherwise, as the shipped config does: a line per request
is part of what a user's proxy costs. (Figures before 2026-12-01 were taken at `warning`.)

`--baseline DIR` runs a fourth target, `base`: the proxy from another checkout (an older commit,
say, from `git worktree add`), with the same config, so a change is measured against it in the
same run.

The machines here are shared and noisy: compare the ratios, not the absolute numbers.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ---------------------------------------------------------------- the servers

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def raw_forwarder(port: int, upstream: str) -> None:
    """The Python floor: forward and relay with one shared session, nothing else."""
    async def startup(app: web.Application) -> None:
        app["session"] = aiohttp.ClientSession(auto_decompress=False)

    async def cleanup(app: web.Application) -> None:
        await app["session"].close()

    async def forward(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {"Content-Type": "application/json"}
        async with request.app["session"].post(upstream + request.path[3:], data=body,
                                               headers=headers) as answer:
            out = web.StreamResponse(status=answer.status,
                                     headers={"Content-Type": answer.headers["Content-Type"]})
            await out.prepare(request)
            async for chunk in answer.content.iter_any():
                await out.write(chunk)
            await out.write_eof()
            return out

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.on_startup.append(startup)
    app.on_cleanup.append(cleanup)
    app.router.add_post("/v1/{tail:.*}", forward)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None,
                loop=_loop())


def _loop() -> asyncio.AbstractEventLoop:
    """The event loop the proxy itself runs on (uvloop when installed): a fair floor."""
    from proxy.__main__ import event_loop_factory
    factory = event_loop_factory()
    return factory() if factory else asyncio.new_event_loop()


def canned_upstream(port: int) -> None:
    """An upstream that answers at once with a fixed completion (stream or not)."""
    answer = orjson.dumps({"id": "chatcmpl-1", "object": "chat.completion", "created": 1,
                           "model": "bench", "choices": [{"index": 0, "finish_reason": "stop",
                                                          "message": {"role": "assistant",
                                                                      "content": "ok"}}],
                           "usage": {"prompt_tokens": 10, "completion_tokens": 1,
                                     "total_tokens": 11}})
    def chunk(text: str, usage: bool) -> bytes:
        # With `include_usage` OpenAI puts `"usage": null` on every chunk (PROTOCOL.md):
        # bytes the proxy takes out again for a client that did not ask.
        return orjson.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1,
                             "model": "bench", "choices": [{"index": 0, "delta": {"content": text},
                                                            "finish_reason": None}],
                             **({"usage": None} if usage else {})})

    words = ("Hello", " from", " the", " canned", " upstream")
    # `stream400`: a long answer, one event per token or so, as real streams come;
    # `paced400` the same at a model's pace. Keyed by (long, include_usage).
    streams = {(long, usage): [chunk(w, usage) for w in
                               ([f" w{n}" for n in range(LONG_STREAM_CHUNKS)] if long else words)]
               for long in (False, True) for usage in (False, True)}

    async def complete(request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if not body.get("stream"):
            return web.Response(body=answer, content_type="application/json")
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        long = body.get("model") in ("bench-long", "bench-paced")
        pause = PACE_S if body.get("model") == "bench-paced" else 0
        usage = bool((body.get("stream_options") or {}).get("include_usage"))
        for data in streams[long, usage]:
            await out.write(b"data: " + data + b"\n\n")
            if long:
                await asyncio.sleep(pause)  # a write per event, not one burst
        if usage:
            await out.write(b'data: {"id":"c","object":"chat.completion.chunk","created":1,'
                            b'"model":"bench","choices":[],"usage":{"prompt_tokens":10,'
                            b'"completion_tokens":5,"total_tokens":15}}\n\n')
        await out.write(b"data: [DONE]\n\n")
        await out.write_eof()
        return out

    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_post("/v1/chat/completions", complete)
    app.router.add_post("/v1/responses", canned_responses_stream())
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None, loop=_loop())


def _responses_event(kind: str, sequence: int, **fields: Any) -> bytes:
    data = orjson.dumps({"type": kind, **fields, "sequence_number": sequence})
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _responses_events() -> list[bytes]:
    """`responses400`: a Responses stream as OpenAI sends one, 400 text deltas in the middle."""
    item = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "annotations": [],
                         "text": "".join(f" w{n}" for n in range(LONG_STREAM_CHUNKS))}]}
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": "bench",
                "status": "in_progress", "output": [], "usage": None}
    deltas = [_responses_event("response.output_text.delta", 2 + n, item_id="msg_1",
                               output_index=0, content_index=0, delta=f" w{n}", logprobs=[])
              for n in range(LONG_STREAM_CHUNKS)]
    done = {**response, "status": "completed", "output": [item],
            "usage": {"input_tokens": 10, "output_tokens": 800, "total_tokens": 810,
                      "output_tokens_details": {"reasoning_tokens": 0}}}
    return [_responses_event("response.created", 0, response=response),
            _responses_event("response.output_item.added", 1, output_index=0,
                             item={**item, "status": "in_progress", "content": []}),
            *deltas,
            _responses_event("response.output_item.done", 2 + len(deltas), output_index=0,
                             item=item),
            _responses_event("response.completed", 3 + len(deltas), response=done)]


def canned_responses_stream() -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    events = _responses_events()

    async def stream(request: web.Request) -> web.StreamResponse:
        await request.read()
        out = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await out.prepare(request)
        for event in events:
            await out.write(event)
            await asyncio.sleep(0)  # a write per event, as for `stream400`
        await out.write_eof()
        return out
    return stream


@dataclass
class Servers:
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    proxy_pid: int = 0
    pids: dict[str, int] = field(default_factory=dict)  # the forwarding process of a target

    def stop(self) -> None:
        for process in self.processes:
            process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()


def stop_cleanly_on_sigterm() -> None:
    """A `kill` of the script runs its `finally` blocks, as Ctrl-C does: the servers it started
    are stopped with it, not left running (Python's own SIGTERM ends the process at once)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))


def _spawn(args: list[str], quiet: bool = True, root: Path = ROOT) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.DEVNULL if quiet else None
    return subprocess.Popen([sys.executable, *args], env=env, stdout=out, stderr=out, cwd=root)


def _wait_ready(url: str, timeout: float = 30) -> None:
    import urllib.request
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except Exception as exc:  # noqa: BLE001 - any answer, even an error status, means up
            if getattr(exc, "code", None):
                return
            time.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


def start_servers(upstream_kind: str, state_dir: str, baseline: Path | None = None,
                  log_level: str = "info", redis_url: str | None = None) -> Servers:
    servers = Servers()
    up_port, raw_port, proxy_port = free_port(), free_port(), free_port()
    if upstream_kind == "canned":
        servers.processes.append(_spawn([__file__, "--serve-canned", str(up_port)]))
    else:
        servers.processes.append(_spawn(["-m", "proxy.testing", "--port", str(up_port)]))
    upstream = f"http://127.0.0.1:{up_port}/v1"
    raw = _spawn([__file__, "--serve-raw", str(raw_port), upstream])
    servers.processes.append(raw)
    proxy = _start_proxy(upstream, proxy_port, Path(state_dir) / "proxy", ROOT, log_level,
                         redis_url)
    servers.processes.append(proxy)
    servers.proxy_pid = proxy.pid
    servers.pids = {"raw": raw.pid, "proxy": proxy.pid}
    servers.urls = {"direct": upstream, "raw": f"http://127.0.0.1:{raw_port}/v1",
                    "proxy": f"http://127.0.0.1:{proxy_port}/v1"}
    if baseline is not None:
        base_port = free_port()
        base = _start_proxy(upstream, base_port, Path(state_dir) / "base", baseline, log_level,
                            redis_url)
        servers.processes.append(base)
        servers.pids["base"] = base.pid
        servers.urls["base"] = f"http://127.0.0.1:{base_port}/v1"
    for name in ("direct", "raw"):
        _wait_ready(servers.urls[name] + "/chat/completions")
    for name in ("proxy", "base"):
        if name in servers.urls:
            _wait_ready(servers.urls[name].removesuffix("/v1") + "/healthz")
    return servers


def _start_proxy(upstream: str, port: int, home: Path, root: Path,
                 log_level: str, redis_url: str | None = None) -> subprocess.Popen[bytes]:
    home.mkdir(parents=True, exist_ok=True)
    config = home / "proxy.yaml"
    config.write_text(proxy_config(upstream, port, home, log_level, redis_url))
    return _spawn(["-m", "proxy", "serve", "--config", str(config)], root=root)


def proxy_config(upstream: str, port: int, home: Path, log_level: str = "info",
                 redis_url: str | None = None) -> str:
    """The benchmarks' proxy: one upstream, state under `home` (or on the Redis server at
    `redis_url`, under a prefix of its own); at `info` (the shipped default) it writes its line
    per request, as a user's proxy does (to /dev/null here)."""
    state: dict[str, Any] = {"path": str(home / "state")}
    if redis_url is not None:
        state.update(backend="redis", redis={"url": redis_url, "prefix": f"bench-{home.name}:"})
    return orjson.dumps({
        "server": {"host": "127.0.0.1", "port": port},
        "upstreams": {"up": {"base_url": upstream}},
        "models": {"bench*": {"max_input_tokens": 1_000_000}},
        "state": state,
        "logging": {"level": log_level},
    }).decode()


# ---------------------------------------------------------------- the load

LONG_STREAM_CHUNKS = 400
PACE_S = 0.001  # between the events of `paced400`
STREAMED = ("stream", "stream400", "paced400", "responses400")
HEAVY = ("big", "stream400", "paced400", "responses400")  # a quarter of the requests per cell
PATHS = {"responses400": "/responses"}  # the rest go to /chat/completions
PACED = ("paced400",)  # at concurrency 16 only: at 1, a cell would take minutes


def scenario_bodies() -> dict[str, bytes]:
    from proxy.testing.sessions import coding_session
    small = {"model": "bench-small", "messages": [{"role": "user", "content": "Say hello."}]}
    big_messages = coding_session(200, seed=11)
    big = {"model": "bench-big", "messages": big_messages}
    body = orjson.dumps(big)
    while len(body) < 400_000:  # pad the tool results to the scenario's ~400 KB
        for message in big["messages"]:
            if message["role"] == "tool":
                message["content"] += "\n" + message["content"][:400]
        body = orjson.dumps(big)
    return {"small": orjson.dumps(small), "stream": orjson.dumps({**small, "stream": True}),
            "stream400": orjson.dumps({**small, "model": "bench-long", "stream": True}),
            "paced400": orjson.dumps({**small, "model": "bench-paced", "stream": True}),
            "responses400": orjson.dumps({"model": "bench-long", "input": "Say hello.",
                                          "stream": True}),
            "big": body}


@dataclass
class Result:
    latencies: list[float] = field(default_factory=list)
    ttfb: list[float] = field(default_factory=list)
    elapsed: float = 0.0
    errors: int = 0
    cpu_s: float | None = None  # the forwarding process's CPU time (user + system)
    loop_s: float | None = None  # the CPU time of its main thread, where its event loop runs

    def merge(self, other: Result) -> None:
        self.latencies += other.latencies
        self.ttfb += other.ttfb
        self.elapsed += other.elapsed
        self.errors += other.errors
        if other.cpu_s is not None:
            self.cpu_s = (self.cpu_s or 0.0) + other.cpu_s
        if other.loop_s is not None:
            self.loop_s = (self.loop_s or 0.0) + other.loop_s

    @property
    def rps(self) -> float:
        return len(self.latencies) / self.elapsed if self.elapsed else 0.0

    @property
    def cpu_ms(self) -> float | None:
        """CPU milliseconds per request of the forwarding process."""
        if self.cpu_s is None or not self.latencies:
            return None
        return self.cpu_s * 1000 / len(self.latencies)

    @property
    def loop_ms(self) -> float | None:
        """CPU milliseconds per request of the event loop's thread alone."""
        if self.loop_s is None or not self.latencies:
            return None
        return self.loop_s * 1000 / len(self.latencies)

    @property
    def loop_busy(self) -> float | None:
        """The share of the run's time the event loop's thread was on a core: near 1, the
        loop is what bounds throughput, and req/s follows its CPU per request; well below,
        something else does (on a 2-core machine, the load and the upstream's share of the
        other core)."""
        if self.loop_s is None or not self.elapsed:
            return None
        return self.loop_s / self.elapsed


def cpu_seconds(pid: int | None, loop_only: bool = False) -> float | None:
    """User plus system CPU time of process `pid`, all its threads (Linux's /proc), or None;
    `loop_only`: of its main thread alone (where both servers run their event loop)."""
    if pid is None:
        return None
    path = f"/proc/{pid}/task/{pid}/stat" if loop_only else f"/proc/{pid}/stat"
    try:
        with open(path) as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def measured(pid: int | None, load: Any) -> Result:
    """The result of `load` (a `drive` call), with the CPU time `pid` spent meanwhile."""
    before, loop_before = cpu_seconds(pid), cpu_seconds(pid, loop_only=True)
    result = await load
    after, loop_after = cpu_seconds(pid), cpu_seconds(pid, loop_only=True)
    if before is not None and after is not None:
        result.cpu_s = after - before
    if loop_before is not None and loop_after is not None:
        result.loop_s = loop_after - loop_before
    return result


async def drive(url: str, body: bytes, stream: bool, requests: int, concurrency: int,
                threads: int, path: str = "/chat/completions") -> Result:
    result = Result()
    queue = list(range(requests))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def worker() -> None:
            while queue:
                n = queue.pop()
                headers = {"Content-Type": "application/json",
                           "Authorization": "Bearer sk-bench", "x-thread-id": f"bench-{n % threads}"}
                started = time.perf_counter()
                async with session.post(url + path, data=body,
                                        headers=headers) as answer:
                    first = None
                    async for _ in answer.content.iter_any():
                        if first is None:
                            first = time.perf_counter()
                    if answer.status != 200:
                        result.errors += 1
                done = time.perf_counter()
                result.latencies.append((done - started) * 1000)
                if stream and first is not None:
                    result.ttfb.append((first - started) * 1000)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        result.elapsed = time.perf_counter() - started
    return result


def path_of(scenario: str) -> str:
    return PATHS.get(scenario, "/chat/completions")


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=300, help="requests per target per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--upstream", choices=("fake", "canned"), default="fake")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout whose proxy runs beside this one, as target `base`")
    parser.add_argument("--log-level", default="info",
                        help="the proxies' logging.level: info (the default config's) writes a "
                             "line per request; warning leaves them out")
    parser.add_argument("--state", choices=("sqlite", "redis"), default="sqlite",
                        help="the proxies' state backend; redis starts a redis-server of its own "
                             "(the program must be installed)")
    parser.add_argument("--serve-raw", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--serve-canned", help=argparse.SUPPRESS)
    args = parser.parse_args()
    stop_cleanly_on_sigterm()  # the servers below (and, with --serve-*, this one) stop cleanly
    if args.serve_raw:
        return raw_forwarder(int(args.serve_raw[0]), args.serve_raw[1])
    if args.serve_canned:
        return canned_upstream(int(args.serve_canned))
    redis = None
    if args.state == "redis":
        from tests.redis_server import start_redis_server  # the tests' own: a throwaway server
        redis = start_redis_server()
    try:
        with tempfile.TemporaryDirectory() as state_dir:
            servers = start_servers(args.upstream, state_dir, args.baseline, args.log_level,
                                    redis.url if redis else None)
            try:
                asyncio.run(run_all(servers, args))
            finally:
                servers.stop()
    finally:
        if redis is not None:
            from tests.redis_server import stop_redis_server
            stop_redis_server(redis)


async def run_all(servers: Servers, args: argparse.Namespace) -> None:
    bodies = scenario_bodies()
    print(f"upstream: {args.upstream}; state: {args.state}; "
          f"{args.requests} requests x {args.rounds} rounds per cell; "
          f"big body {len(bodies['big']) / 1024:.0f} KB; proxy log level {args.log_level}")
    header = (f"{'scenario':<8} {'conc':>4} {'target':<7} {'req/s':>8} {'p50 ms':>8} "
              f"{'p99 ms':>8} {'ttfb p50':>9} {'cpu ms/req':>10} {'loop ms/req':>11} "
              f"{'loop busy':>9} {'errors':>6}")
    print(header)
    for name, body in bodies.items():
        for concurrency in (16,) if name in PACED else (1, 16):
            count = max(50, args.requests // (4 if name in HEAVY else 1))
            results = {target: Result() for target in servers.urls}
            for target, url in servers.urls.items():  # warm-up, not counted
                await drive(url, body, name in STREAMED, 20, concurrency, 16, path_of(name))
            per_round: list[float] = []  # throughput proxy/raw of each round
            for _ in range(args.rounds):
                this_round: dict[str, Result] = {}
                for target, url in servers.urls.items():
                    load = drive(url, body, name in STREAMED, count, concurrency, 16,
                                 path_of(name))
                    this_round[target] = await measured(servers.pids.get(target), load)
                    results[target].merge(this_round[target])
                if this_round["raw"].rps:
                    per_round.append(this_round["proxy"].rps / this_round["raw"].rps)
            report(name, concurrency, results, per_round)


def report(name: str, concurrency: int, results: dict[str, Result],
           per_round: list[float] | None = None) -> None:
    for target, result in results.items():
        ttfb = f"{percentile(result.ttfb, 50):9.2f}" if result.ttfb else f"{'-':>9}"
        cpu = f"{result.cpu_ms:10.3f}" if result.cpu_ms is not None else f"{'-':>10}"
        loop = f"{result.loop_ms:11.3f}" if result.loop_ms is not None else f"{'-':>11}"
        busy = f"{result.loop_busy:9.2f}" if result.loop_busy is not None else f"{'-':>9}"
        print(f"{name:<8} {concurrency:>4} {target:<7} {result.rps:8.1f} "
              f"{percentile(result.latencies, 50):8.2f} {percentile(result.latencies, 99):8.2f} "
              f"{ttfb} {cpu} {loop} {busy} {result.errors:>6}")
    proxy, raw, direct = results["proxy"], results["raw"], results["direct"]
    added = percentile(proxy.latencies, 50) - percentile(direct.latencies, 50)
    line = (f"{'':<8} {'':>4} ratios  throughput proxy/raw {proxy.rps / raw.rps:.2f}, "
            f"proxy/direct {proxy.rps / direct.rps:.2f}; added p50 over direct {added:+.2f} ms")
    if proxy.ttfb and direct.ttfb:
        line += (f"; added TTFB p50 {percentile(proxy.ttfb, 50) - percentile(direct.ttfb, 50):+.2f}"
                 " ms")
    if proxy.cpu_ms and raw.cpu_ms:
        line += f"; CPU per request proxy/raw {proxy.cpu_ms / raw.cpu_ms:.2f}"
    if proxy.loop_ms and raw.loop_ms:
        line += f"; loop CPU per request proxy/raw {proxy.loop_ms / raw.loop_ms:.2f}"
    if per_round and len(per_round) > 1:
        # How far the machine's load moved the ratio while this cell ran.
        ordered = sorted(per_round)
        line += (f"; throughput proxy/raw by round min {ordered[0]:.2f}, "
                 f"median {percentile(ordered, 50):.2f}, max {ordered[-1]:.2f}")
    print(line)
    base = results.get("base")
    if base is not None:
        added = percentile(base.latencies, 50) - percentile(direct.latencies, 50)
        line = (f"{'':<8} {'':>4} base    throughput base/raw {base.rps / raw.rps:.2f}, "
                f"proxy/base {proxy.rps / base.rps:.2f}; base added p50 {added:+.2f} ms")
        if proxy.cpu_ms and base.cpu_ms:
            line += f"; CPU per request proxy/base {proxy.cpu_ms / base.cpu_ms:.2f}"
        if proxy.loop_ms and base.loop_ms:
            line += f"; loop CPU per request proxy/base {proxy.loop_ms / base.loop_ms:.2f}"
        if base.ttfb and direct.ttfb:
            line += (f"; base added TTFB p50 "
                     f"{percentile(base.ttfb, 50) - percentile(direct.ttfb, 50):+.2f} ms")
        print(line)


if __name__ == "__main__":
    main()
