"""How long the proxy's event loop is held by one big request: every other client waits that long.

The proxy serves everything on one event loop, so CPU work done on it (parsing a big body,
counting its tokens, a compaction's own work, reading a big answer) delays every other request
and stream by as much. This measures it from outside: a probe process sends `GET /healthz` over
one kept-alive connection in a tight loop (1 ms between probes) while a scenario's request runs,
and the longest probe is the longest the loop was held (a probe costs about its idle p50).

Scenarios, each repeated with different content (so the proxy's caches are cold); chat and
Responses then once warm (the same thread's next turn: the answer and a user message added):
  chat-N       a thread of N chat messages (`coding_session(N)`), first seen (cold)
  responses-N  the same as Responses API input items, streamed
  compact-N    a thread of N messages grows turn by turn under a model whose trigger it
               crosses: the turn before (a known thread under its window, the steady state)
               and the turn that compacts, summarized by the fake upstream; the loop is held
               by the proxy's own work around the summary (cutoff, transcript, restore,
               post-check, checkpoint), not by the summarizer's wait
  manual-N     `/compact` on a known thread (60% of N messages, under that model)
  answer-json  a 400 KB non-streamed answer through the proxy (usage read, anchor)
  answer-sse   the same answer streamed (some 34,000 chunks; the stream taps)
Chat and Responses go to bench_overhead's canned upstream (it answers at once); the rest to
the project's fake upstream (`FakeUpstream` with its fake summarizer), run by this script, one
for each proxy measured (the fake keeps what it counted); the summaries go to a model of a 64k
window (a big prefix is summarized in several calls).

Printed per scenario: the request body's size, the request's latency, the longest and the p99
probe during the request, the answer's status, `x-compaction` and `x-context-tokens`, and (in
the header) the probe's p50 when the proxy is idle. A compact-N run takes a minute or two.

    .venv/bin/python scripts/bench_stalls.py [--repeat 3] [--only chat-1000,compact-2000]
        [--baseline DIR]

`--baseline DIR` measures the proxy of another checkout (`git worktree add DIR COMMIT`) in the
same run, scenario by scenario, on the same content, each going first in turn. These machines
are shared and noisy: compare the two side by side, and a stall of tens of ms with one of a
few. The probe's p99 compares only requests of like latency (a longer request has more idle
probes); its maximum is the stall.
"""

from __future__ import annotations

import argparse
import asyncio
import http.client
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

# The scripts directory is not a package: its neighbour is imported by path.
import bench_overhead as overhead  # noqa: E402

ANSWER_CHARS = 400_000
HUGE_WINDOW = 100_000_000  # no compaction, whatever the thread's size
PROBE_PAUSE_S = 0.001
# Tokens per byte of a `coding_session` thread as the proxy estimates it after the cheap
# stages (0.078-0.089): a compaction model's window is set so its trigger (0.75 of it) falls
# at about 70-80% of the thread.
TOKENS_PER_BYTE = 0.06
COMPACT_SIZES = (1000, 2000)
# The summarizer's own model, of a 64k window, as a cheap summarizer often has: a big prefix
# is summarized in several calls.
SUMMARIZER, SUMMARIZER_WINDOW = "stall-summarizer", 64_000


# ---------------------------------------------------------------- the servers

def fake_upstream(port: int) -> None:
    """The project's fake upstream, with its fake summarizer; `stall-answer*` models get a
    long answer, and what it received is not kept (the bench sends megabytes)."""
    from proxy.testing.fake_upstream import FakeUpstream
    from proxy.testing.replies import Reply
    from proxy.testing.summarizer import FakeSummarizer

    async def serve() -> None:
        fake = FakeUpstream()
        long_answer = Reply.text(" ".join(f"w{n}" for n in range(ANSWER_CHARS // 6))
                                 [:ANSWER_CHARS])

        def respond(recorded: Any) -> Reply | None:
            fake.requests.clear()
            model = recorded.json.get("model", "") if isinstance(recorded.json, dict) else ""
            return long_answer if model.startswith("stall-answer") else None

        fake.responder = respond
        FakeSummarizer.install(fake)
        await fake.start("127.0.0.1", port)
        await asyncio.Event().wait()

    asyncio.run(serve())


def config(canned: str, fake: str, port: int, home: Path, windows: dict[str, int]) -> str:
    """bench_overhead's proxy config with two upstreams: `bench-*` to the canned one, the rest
    to the fake; `windows`: the compaction models' `max_input_tokens`."""
    settings = orjson.loads(overhead.proxy_config(canned, port, home))
    settings["upstreams"] = {"canned": {"base_url": canned}, "fake": {"base_url": fake}}
    settings["routes"] = [{"model": "bench-*", "upstream": "canned"},
                          {"model": "*", "upstream": "fake"}]
    settings["models"] = {**{name: {"max_input_tokens": w} for name, w in windows.items()},
                          SUMMARIZER: {"max_input_tokens": SUMMARIZER_WINDOW},
                          "*": {"max_input_tokens": HUGE_WINDOW}}
    settings["compaction"] = {"summarizer": {"model": SUMMARIZER}}
    return orjson.dumps(settings).decode()


@dataclass
class Target:
    name: str
    url: str  # the proxy's /v1


def start_proxy(name: str, root: Path, canned: str, fake: str, home: Path,
                windows: dict[str, int], processes: list[Any]) -> Target:
    port = overhead.free_port()
    home.mkdir(parents=True)
    path = home / "proxy.yaml"
    path.write_text(config(canned, fake, port, home, windows))
    processes.append(overhead._spawn(["-m", "proxy", "serve", "--config", str(path)], root=root))
    url = f"http://127.0.0.1:{port}"
    overhead._wait_ready(url + "/healthz")
    print(f"{name}: pid {processes[-1].pid}", flush=True)  # for a profiler
    return Target(name, url + "/v1")


# ---------------------------------------------------------------- the probe

def _probe(host: str, port: int, commands: Any) -> None:
    """Probe `/healthz` until told to stop; each `dump` sends back (sent, latency s) samples."""
    connection = http.client.HTTPConnection(host, port, timeout=30)
    samples: list[tuple[float, float]] = []
    while True:
        if commands.poll():
            if commands.recv() == "stop":
                return
            commands.send(samples)
            samples = []
        sent = time.monotonic()
        connection.request("GET", "/healthz")
        connection.getresponse().read()
        samples.append((sent, time.monotonic() - sent))
        time.sleep(PROBE_PAUSE_S)


class Probe:
    def __init__(self, url: str) -> None:
        host, port = url.removeprefix("http://").split("/")[0].split(":")
        self._commands, child = multiprocessing.Pipe()
        self._process = multiprocessing.get_context("spawn").Process(
            target=_probe, args=(host, int(port), child), daemon=True)
        self._process.start()

    def samples(self) -> list[tuple[float, float]]:
        self._commands.send("dump")
        return self._commands.recv()

    def stop(self) -> None:
        self._commands.send("stop")
        self._process.join(10)


# ---------------------------------------------------------------- the scenarios

@dataclass
class Measured:
    body_kb: float
    latency_ms: float
    probe_max_ms: float
    probe_p99_ms: float
    status: int
    compaction: str  # the answer's `x-compaction` and `x-context-tokens`


@dataclass
class Turn:
    path: str
    body: dict[str, Any]
    thread: str


Sender = Callable[[Turn], Awaitable[Measured]]


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def _next_turn(turn: Turn, answer: dict[str, Any]) -> Turn:
    """The same thread's next turn: the answer and a new user message appended."""
    body = dict(turn.body)
    if "messages" in body:
        body["messages"] = [*body["messages"], answer, _user("Go on.")]
    else:
        body["input"] = [*body["input"], answer,
                         {"type": "message", "role": "user",
                          "content": [{"type": "input_text", "text": "Go on."}]}]
    return Turn(turn.path, body, turn.thread)


_CHAT_ANSWER = {"role": "assistant", "content": "ok"}
_RESPONSES_ANSWER = {"type": "message", "role": "assistant", "content": [
    {"type": "output_text", "annotations": [],
     "text": "".join(f" w{n}" for n in range(overhead.LONG_STREAM_CHUNKS))}]}


async def thread_cold_warm(send: Sender, api: str, n: int, seed: int, label: str,
                           warm: bool) -> list[tuple[str, Measured]]:
    from proxy.testing.sessions import coding_session
    items = coding_session(n, seed=seed, api=api)
    thread = f"{label}-{seed}"
    if api == "chat":
        turn = Turn("/chat/completions", {"model": "bench-chat", "messages": items}, thread)
        answer = _CHAT_ANSWER
    else:
        turn = Turn("/responses", {"model": "bench-long", "input": items, "stream": True}, thread)
        answer = _RESPONSES_ANSWER
    out = [("cold", await send(turn))]
    if warm:
        out.append(("warm", await send(_next_turn(turn, answer))))
    return out


def _turn_end(items: list[dict[str, Any]], k: int) -> int:
    """The first turn end at or after `k`: not inside a tool call's group."""
    while k < len(items) and (items[k - 1]["role"] == "assistant" or items[k]["role"] == "tool"):
        k += 1
    return k


async def compaction(send: Sender, n: int, seed: int, label: str,
                     warm: bool) -> list[tuple[str, Measured]]:
    """The thread grows turn by turn under the compaction model, from 60% of its messages by
    2% a turn, until a turn crosses the trigger: that turn (an LLM compaction) and the one
    before it (a known thread under its window, the steady state) are measured."""
    from proxy.testing.sessions import coding_session
    items = coding_session(n, seed=seed)
    body, thread = {"model": f"stall-compact-{n}"}, f"{label}-{seed}"
    before: Measured | None = None
    k = _turn_end(items, int(n * 0.6))
    while True:
        m = await send(Turn("/chat/completions", {**body, "messages": items[:k]}, thread))
        if m.compaction.startswith("compacted"):
            return [("before it", before), ("compaction", m)] if before else [("compaction", m)]
        if k == len(items):
            return [("never", m)]  # the window is too large for this thread
        before, k = m, min(len(items), _turn_end(items, k + max(2, n // 50)))


async def manual(send: Sender, n: int, seed: int, label: str,
                 warm: bool) -> list[tuple[str, Measured]]:
    """`/compact` on a thread the proxy knows, under the trigger of the compaction model."""
    from proxy.testing.sessions import coding_session
    items = coding_session(n, seed=seed)
    items = items[:_turn_end(items, int(n * 0.6))]
    body, thread = {"model": f"stall-compact-{n}"}, f"{label}-{seed}"
    await send(Turn("/chat/completions", {**body, "messages": items}, thread))
    turn = Turn("/chat/completions", {**body, "messages": [*items, _user("/compact")]}, thread)
    return [("/compact", await send(turn))]


async def long_answer(send: Sender, stream: bool, seed: int, label: str,
                      warm: bool) -> list[tuple[str, Measured]]:
    body: dict[str, Any] = {"model": f"stall-answer-{seed}",
                            "messages": [_user(f"Write at length ({seed}).")]}
    if stream:
        body["stream"] = True
    return [("answer", await send(Turn("/chat/completions", body, f"{label}-{seed}")))]


def _scenarios() -> dict[str, Callable[..., Awaitable[list[tuple[str, Measured]]]]]:
    def bind(run: Callable[..., Any], *args: Any) -> Callable[..., Any]:
        return lambda send, seed, label, warm: run(send, *args, seed, label, warm)
    found: dict[str, Callable[..., Any]] = {}
    for n in (1000, 3000):
        found[f"chat-{n}"] = bind(thread_cold_warm, "chat", n)
    for n in (1000, 3000):
        found[f"responses-{n}"] = bind(thread_cold_warm, "responses", n)
    for n in COMPACT_SIZES:
        found[f"compact-{n}"] = bind(compaction, n)
    for n in COMPACT_SIZES:
        found[f"manual-{n}"] = bind(manual, n)
    found["answer-json"] = bind(long_answer, False)
    found["answer-sse"] = bind(long_answer, True)
    return found


def compaction_windows() -> dict[str, int]:
    """Each compaction model's window, from a thread of its size (seed 0)."""
    from proxy.testing.sessions import coding_session
    windows = {}
    for n in COMPACT_SIZES:
        size = len(orjson.dumps(coding_session(n, seed=0)))
        windows[f"stall-compact-{n}"] = int(size * TOKENS_PER_BYTE / 0.75)
    return windows


# ---------------------------------------------------------------- the measurement

def sender(session: aiohttp.ClientSession, target: Target, probe: Probe) -> Sender:
    async def send(turn: Turn) -> Measured:
        data = orjson.dumps(turn.body)
        headers = {"Content-Type": "application/json", "Authorization": "Bearer sk-bench",
                   "x-thread-id": turn.thread}
        probe.samples()  # what came before is not this request's
        started = time.monotonic()
        async with session.post(target.url + turn.path, data=data, headers=headers) as answer:
            async for _ in answer.content.iter_any():
                pass
            status = answer.status
            compaction = (f"{answer.headers.get('x-compaction', '-')} "
                          f"{answer.headers.get('x-context-tokens', '')}")
        ended = time.monotonic()
        await asyncio.sleep(0.02)  # a probe held until the end comes back
        during = [lat for sent, lat in probe.samples() if sent < ended and sent + lat > started]
        during = during or [0.0]
        return Measured(len(data) / 1024, (ended - started) * 1000, max(during) * 1000,
                        overhead.percentile(during, 99) * 1000, status, compaction)
    return send


async def idle_p50(probe: Probe) -> float:
    probe.samples()
    await asyncio.sleep(1.0)
    return statistics.median(lat for _, lat in probe.samples()) * 1000


async def run(targets: list[Target], args: argparse.Namespace) -> None:
    scenarios = _scenarios()
    chosen = args.only.split(",") if args.only else list(scenarios)
    probes = {t.name: Probe(t.url) for t in targets}
    try:
        timeout = aiohttp.ClientTimeout(total=600)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            idle = {t.name: await idle_p50(probes[t.name]) for t in targets}
            print("probe p50 when idle: " + ", ".join(f"{name} {ms:.2f} ms"
                                                       for name, ms in idle.items()))
            print(f"{'scenario':<14} {'turn':<10} {'target':<6} {'body KB':>8} "
                  f"{'request ms':>10} {'probe max':>9} {'probe p99':>9} {'status':>6} x-compaction")
            for name in chosen:
                for repeat in range(args.repeat):
                    # Each in turn first: the second of two requests at one canned upstream
                    # may find the machine's caches warmer.
                    for target in targets if repeat % 2 == 0 else targets[::-1]:
                        send = sender(session, target, probes[target.name])
                        # The same content for every target; each target its own thread.
                        results = await scenarios[name](send, 100 + repeat,
                                                        f"{name}-{target.name}",
                                                        warm=repeat == args.repeat - 1)
                        for turn, m in results:
                            print(f"{name:<14} {turn:<10} {target.name:<6} {m.body_kb:8.0f} "
                                  f"{m.latency_ms:10.1f} {m.probe_max_ms:9.1f} "
                                  f"{m.probe_p99_ms:9.1f} {m.status:>6} {m.compaction}", flush=True)
    finally:
        for probe in probes.values():
            probe.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3,
                        help="cold runs per scenario (new content each); the last adds a warm turn")
    parser.add_argument("--only", help="comma-separated scenario names")
    parser.add_argument("--baseline", type=Path,
                        help="a checkout whose proxy is measured beside this one, as `base`")
    parser.add_argument("--serve-fake", help=argparse.SUPPRESS)
    args = parser.parse_args()
    overhead.stop_cleanly_on_sigterm()
    if args.serve_fake:
        return fake_upstream(int(args.serve_fake))
    processes: list[Any] = []
    try:
        canned_port = overhead.free_port()
        processes.append(overhead._spawn([overhead.__file__, "--serve-canned", str(canned_port)]))
        canned = f"http://127.0.0.1:{canned_port}/v1"
        overhead._wait_ready(canned + "/chat/completions")
        windows = compaction_windows()
        roots = {"proxy": ROOT}
        if args.baseline is not None:
            roots["base"] = args.baseline.resolve()
        with tempfile.TemporaryDirectory() as state:
            targets = []
            for name, root in roots.items():
                # A fake upstream each: it keeps what it counted (a prompt cache, the fake
                # summarizer's counts), and the target that came second would find it warm.
                fake_port = overhead.free_port()
                processes.append(overhead._spawn([__file__, "--serve-fake", str(fake_port)]))
                fake = f"http://127.0.0.1:{fake_port}/v1"
                overhead._wait_ready(fake + "/models")
                targets.append(start_proxy(name, root, canned, fake, Path(state) / name,
                                           windows, processes))
            asyncio.run(run(targets, args))
    finally:
        overhead.Servers(processes).stop()


if __name__ == "__main__":
    main()
