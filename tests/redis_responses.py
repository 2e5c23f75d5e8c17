"""Two `compaction-proxy serve` processes on one Redis, in front of two fake upstreams routed
by model, for the Responses API across instances (`tests/test_redis_instances_responses*.py`).

`claude-*` goes to the upstream `other`, every other model (a model-less request too) to
`fake`: a request that continues a response or conversation by its id must reach the upstream
that made it, whatever its own model routes to. The fakes sign their encrypted reasoning with
keys of their own, as two providers' organisations do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.testing.fake_upstream import FakeUpstream
from proxy.testing.summarizer import is_summarizer_request
from tests.conftest import API_KEY
from tests.process import ProxyProcess, write_config

LIMIT = 16_000
MODEL = "small-codex"  # routed to `fake`
OTHER_MODEL = "claude-sonnet"  # routed to `other`
MODELS = {"small-*": {"max_input_tokens": LIMIT}}
ROUTES = [{"model": "claude-*", "upstream": "other"}, {"model": "*", "upstream": "fake"}]


@dataclass
class Rig:
    fake: FakeUpstream
    other: FakeUpstream
    a: ProxyProcess
    b: ProxyProcess

    def client(self, proxy: ProxyProcess) -> openai.OpenAI:
        return openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                             timeout=30)


@pytest.fixture
def rig(make_fake: Callable[..., FakeUpstream], tmp_path: Path, redis_url: str,
        redis_prefix: str) -> Iterator[Callable[..., Rig]]:
    started: list[ProxyProcess] = []

    def start(compaction: dict[str, Any] | None = None, prelude: str | None = None,
              **fake_options: Any) -> Rig:
        fake = make_fake(limits={"small-*": LIMIT}, **fake_options)
        other = make_fake(key=b"the other upstream's signing key", **fake_options)
        for n in range(2):
            config = write_config(
                tmp_path / f"i{n}.yaml", fake.url, tmp_path / f"s{n}",
                upstreams={"other": {"base_url": other.url, "timeout_s": 20}}, routes=ROUTES,
                state={"backend": "redis", "redis": {"url": redis_url, "prefix": redis_prefix}},
                models=MODELS, **({"compaction": compaction} if compaction else {}))
            started.append(ProxyProcess(config, prelude=prelude))
        return Rig(fake, other, started[-2], started[-1])

    yield start
    for process in started:
        process.kill()


def main_requests(fake: FakeUpstream) -> list[Any]:
    """What `fake` received on `POST /v1/responses` for the agent (no summaries)."""
    return [r for r in fake.requests if r.method == "POST" and r.path == "/v1/responses"
            and not is_summarizer_request(r.json)]
