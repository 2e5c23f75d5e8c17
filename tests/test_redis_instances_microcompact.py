"""Microcompaction's sticky mark across instances on one Redis: the old tool results that one
instance cleared after an idle time stay cleared when the thread's next turn reaches another,
so the bytes sent upstream for the kept prefix are the same whichever instance builds them.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from proxy.core.microcompact import CLEARED_TEXT
from tests.process import ProxyProcess, write_config
from tests.test_compaction_detached import GatedFake, gated  # noqa: F401
from tests.test_compaction_failure_paths import post
from tests.test_compaction_failures import MODELS, _main_requests

CHEAP = {"collapse": {"enabled": False}, "truncate": {"enabled": False},
         "microcompact": {"enabled": True, "idle_seconds": 1, "keep_recent": 1}}


@pytest.fixture
def two(tmp_path: Path, gated: GatedFake, redis_url: str,
        redis_prefix: str) -> Iterator[list[ProxyProcess]]:
    started = []
    for n in range(2):
        config = write_config(tmp_path / f"i{n}.yaml", gated.url, tmp_path / f"s{n}",
                              state={"backend": "redis",
                                     "redis": {"url": redis_url, "prefix": redis_prefix}},
                              models=MODELS, compaction=CHEAP)
        started.append(ProxyProcess(config))
    yield started
    for process in started:
        process.kill()


def tool_turns(count: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    for k in range(count):
        call = {"id": f"call_{k}", "type": "function",
                "function": {"name": "read_file", "arguments": f'{{"path": "f{k}.py"}}'}}
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": f"call_{k}",
                      "content": f"# file {k}\n" + "x = compute(1, 2, 3)\n" * 150}]
    return messages


def sent_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


def test_results_cleared_at_one_instance_stay_cleared_at_the_other(
        two: list[ProxyProcess], gated: GatedFake) -> None:
    a, b = two
    messages = tool_turns(4)
    assert post(a, messages, "sticky").status_code == 200
    time.sleep(1.5)  # idle: the next turn clears the old results
    messages += [{"role": "assistant", "content": "Read them."},
                 {"role": "user", "content": "Now the tests."}]
    assert post(a, messages, "sticky").status_code == 200
    cleared = sent_results(_main_requests(gated)[-1].json)
    assert cleared[:3] == [CLEARED_TEXT] * 3 and cleared[3] != CLEARED_TEXT
    messages += [{"role": "assistant", "content": "On it."},
                 {"role": "user", "content": "And the docs."}]
    assert post(b, messages, "sticky").status_code == 200  # at once: not idle at b
    at_b = _main_requests(gated)[-1].json
    assert sent_results(at_b) == cleared
    at_a = _main_requests(gated)[-2].json
    assert at_b["messages"][:len(at_a["messages"])] == at_a["messages"]
