"""A real `compaction-proxy serve` on a config file the reload tests write again: the
upstreams and the state path stay, the keys change. The process is killed at the test's end."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.process import ProxyProcess, write_config

Upstreams = str | dict[str, str]  # one URL, or upstreams by name (`write_config`)


@dataclass
class Served:
    proxy: ProxyProcess
    config: Path
    upstreams: Upstreams
    state: Path

    def rewrite(self, *, state: Path | None = None, **keys: Any) -> None:
        """The config file written anew with `keys` (the same upstreams; the same state
        path unless `state` names another)."""
        write_config(self.config, self.upstreams, state or self.state, **keys)


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """`serve(upstreams, prelude=None, **keys)`: a process on `tmp_path/p.yaml`."""
    started: list[ProxyProcess] = []

    def start(upstreams: Upstreams, *, prelude: str | None = None, **keys: Any) -> Served:
        state = tmp_path / "state"
        config = write_config(tmp_path / "p.yaml", upstreams, state, **keys)
        started.append(ProxyProcess(config, prelude=prelude))
        return Served(started[-1], config, upstreams, state)

    yield start
    for proxy in started:
        proxy.kill()
