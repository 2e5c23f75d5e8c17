"""Hostile thread ids and two tenants through real proxy instances on one Redis: an id with
NUL, a lone surrogate or 60,000 characters is a thread like any other across instances, and
one id used by two tenants stays two threads.
"""

from __future__ import annotations

import time
from typing import Any

import httpx
import orjson

from tests.process import cli
from tests.test_compaction_detached import GatedFake, gated  # noqa: F401
from tests.test_redis_instances import instances  # noqa: F401

HOSTILE = {"nul": "a\u0000b", "surrogate": "\\ud800x", "huge": "z" * 60_000}


def turn(proxy: Any, messages: list[dict[str, Any]], key: str, api_key: str) -> httpx.Response:
    # The lone surrogate goes as the JSON escape a client would send: no UTF-8 form exists.
    body = orjson.dumps({"model": "small-coder", "messages": messages,
                         "prompt_cache_key": "@KEY@"}).replace(b"@KEY@", key.encode())
    return httpx.post(f"{proxy.base_url}/chat/completions", content=body, timeout=30,
                      headers={"content-type": "application/json",
                               "authorization": f"Bearer {api_key}"})


def test_hostile_ids_and_two_tenants_are_threads_across_instances(
        instances: Any, gated: GatedFake) -> None:  # noqa: F811
    a, b = instances()
    keys = [(name, key, api) for name, key in HOSTILE.items()
            for api in ("sk-tenant-one", "sk-tenant-two")]
    for n, (name, key, api) in enumerate(keys):
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"Start {name} {api}."}]
        first = turn(a, messages, key.replace("\u0000", "\\u0000"), api)
        assert first.status_code == 200, first.text
        messages += [{"role": "assistant", "content": first.json()["choices"][0]["message"]
                      ["content"]}, {"role": "user", "content": "Go on."}]
        a.wait_for("request", count=n + 1)
        time.sleep(0.3)  # the answer's anchor is written just after it went out
        second = turn(b, messages, key.replace("\u0000", "\\u0000"), api)
        assert second.status_code == 200, second.text
        [*_, line] = b.wait_for("request", count=n + 1)
        assert line["anchor_used"] is True, (name, api, line)
    config = [arg for arg in a.process.args if str(arg).endswith(".yaml")][0]
    listed = cli("threads", "--config", str(config))
    assert listed.returncode == 0, listed.stderr
    checked = cli("check-state", "--config", str(config))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "6 threads" in checked.stdout, checked.stdout
