"""Several `compaction-proxy serve` processes on one Redis, for `bench_compaction.py
--instances N --state redis`: a redis-server of their own, the proxies as real processes (as
behind a load balancer), and their log lines read back as one proxy's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.process import ProxyProcess, write_config
from tests.redis_server import start_redis_server, stop_redis_server


class Logs:
    def __init__(self, processes: list[ProxyProcess]) -> None:
        self.processes = processes

    def events(self, name: str) -> list[dict[str, Any]]:
        """Every process's `name` lines, in the order they were written."""
        found = [line for p in self.processes for line in p.events(name)]
        return sorted(found, key=lambda line: line.get("timestamp", ""))


class Instances:
    """The proxies, with what the bench reads of one proxy: its URL (each next turn at the next
    instance, `base_urls`), its request lines and its log."""

    def __init__(self, processes: list[ProxyProcess]) -> None:
        self.processes = processes
        self.base_urls = [p.base_url for p in processes]
        self.base_url = self.base_urls[0]
        self.logs = Logs(processes)

    def requests(self) -> list[dict[str, Any]]:
        return self.logs.events("request")

    def settle(self, count: int, timeout: float = 30) -> None:
        """Wait for `count` request lines (a line is read from a pipe after its answer)."""
        deadline = time.monotonic() + timeout
        while len(self.requests()) < count and time.monotonic() < deadline:
            time.sleep(0.05)


@contextmanager
def redis_instances(count: int, upstream_url: str, directory: Path,
                    **sections: Any) -> Iterator[Instances]:
    server = start_redis_server()
    processes: list[ProxyProcess] = []
    try:
        for n in range(count):
            config = write_config(
                directory / f"instance{n}.yaml", upstream_url, directory / f"state{n}",
                state={"backend": "redis", "redis": {"url": server.url, "prefix": "bench:"}},
                **sections)
            processes.append(ProxyProcess(config))
        yield Instances(processes)
    finally:
        for process in processes:
            process.kill()
        stop_redis_server(server)
