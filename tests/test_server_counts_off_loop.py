"""A request with many new bytes has them counted off the event loop: while its count is held,
/healthz and other threads' requests are answered. A real `serve` process whose count of the
big request's messages is held on a file the test releases (`Hold`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from proxy.server.estimators import OFF_LOOP_BYTES
from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.process import ProxyProcess, write_config
from tests.test_server_reload_off_loop import Hold

MODEL = "gpt-4o"

# The count of one message or item (`rules.<name>`) whose content is longer than
# OFF_LOOP_BYTES: the big request's own, wherever it runs. Each call is numbered (held-1,
# held-2, ...); the first waits for release-1.
_HOLD_BIG = """
import itertools, pathlib, time
import proxy.tokens.rules as target
_real, _calls = target.{name}, itertools.count(1)
def held(element, *args, **kwargs):
    if len(str(element.get("content"))) > {limit}:
        n = next(_calls)
        pathlib.Path({where!r}, f"held-{{n}}").touch()
        while n == 1 and not pathlib.Path({where!r}, "release-1").exists():
            time.sleep(0.01)
    return _real(element, *args, **kwargs)
target.{name} = held
"""
APIS = {"chat": ("chat_message_tokens", "/chat/completions", "messages"),
        "responses": ("responses_item_tokens", "/responses", "input")}


def _send(proxy: ProxyProcess, api: str, elements: list[dict[str, Any]],
          thread: str) -> httpx.Response:
    _, path, field = APIS[api]
    return httpx.post(f"{proxy.base_url}{path}", timeout=20,
                      content=orjson.dumps({"model": MODEL, field: elements}),
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": thread,
                               "content-type": "application/json"})


@pytest.mark.parametrize("api", APIS)
def test_a_big_new_request_is_counted_while_the_loop_serves_others(tmp_path: Path, make_fake,
                                                                   api: str) -> None:
    name, _, field = APIS[api]
    fake = make_fake()
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state", tokens=COUNTED)
    hold = Hold(tmp_path / "hold", "proxy.tokens.rules", name)
    hold.prelude = _HOLD_BIG.format(name=name, limit=OFF_LOOP_BYTES, where=str(hold.where))
    proxy = ProxyProcess(config, prelude=hold.prelude)
    big = [{"role": "system", "content": "You are a coding agent."},
           {"role": "user", "content": "Read this log.\n" + "line of a build log\n" * 2000}]
    try:
        with httpx.Client() as client, ThreadPoolExecutor(1) as pool:
            first = pool.submit(_send, proxy, api, big, "t-big")
            hold.wait_held()
            # Held: the loop answers health checks and other threads' requests.
            assert client.get(f"http://127.0.0.1:{proxy.port}/healthz",
                              timeout=10).status_code == 200
            small = [{"role": "user", "content": "hi"}]
            assert _send(proxy, api, small, "t-other").status_code == 200
            assert not first.done()
            hold.release()
            answer = first.result(timeout=20)
        assert answer.status_code == 200
        assert fake.requests[-1].json[field] == big  # nothing else changed
        # Counted once: the next turn finds the big message counted.
        calls = len(list(hold.where.glob("held-*")))
        turn = [*big, {"role": "assistant", "content": "Read."}, {"role": "user", "content": "ok"}]
        assert _send(proxy, api, turn, "t-big").status_code == 200
        assert len(list(hold.where.glob("held-*"))) == calls
    finally:
        hold.release_all()
        proxy.kill()
