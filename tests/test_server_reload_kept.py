"""What a reload keeps, in a real `compaction-proxy serve`: which upstream made each stored
response (also through a config whose routes name one upstream), and the token caches (also
when `tokens.safety_margin` changes, which still applies to the next request)."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import API_KEY
from tests.harness import COUNTED
from tests.process import ProxyProcess
from tests.reload_serving import serve  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")

HEADERS = {"authorization": f"Bearer {API_KEY}"}
TWO = [{"model": "m-b*", "upstream": "b"}, {"model": "*", "upstream": "a"}]
ONE = [{"model": "*", "upstream": "a"}]


def _reloaded(proxy: ProxyProcess, count: int) -> dict[str, Any]:
    proxy.signal(signal.SIGHUP)
    return proxy.wait_for("config_reloaded", count)[count - 1]


def test_which_upstream_made_a_response_outlives_a_reload_to_one_upstream_and_back(
        serve, make_fake) -> None:
    a, b = make_fake(), make_fake()
    served = serve({"a": a.url, "b": b.url}, routes=TWO)
    proxy = served.proxy
    made = httpx.post(f"{proxy.base_url}/responses", headers=HEADERS, timeout=20,
                      json={"model": "m-b1", "input": "hi"})
    assert made.status_code == 200 and len(b.requests) == 1 and not a.requests
    made_id = made.json()["id"]
    served.rewrite(routes=ONE)
    assert _reloaded(proxy, 1)["changed"] == ["routes"]
    served.rewrite(routes=TWO)
    assert _reloaded(proxy, 2)["changed"] == ["routes"]
    got = httpx.get(f"{proxy.base_url}/responses/{made_id}", headers=HEADERS, timeout=20)
    assert got.status_code == 200 and got.json()["id"] == made_id
    then = httpx.post(f"{proxy.base_url}/responses", headers=HEADERS, timeout=20,
                      json={"model": "small-1", "previous_response_id": made_id, "input": "more"})
    assert then.status_code == 200
    assert [r.method for r in b.requests] == ["POST", "GET", "POST"] and not a.requests


# Every entry the proxy counts, one line each in `{where}`: none for an entry found counted.
_COUNTED = """
import pathlib
from proxy.tokens.estimate import TokenEstimator
_real = TokenEstimator._measure
def measure(self, entry, *args):
    with open({where!r}, "a") as out:
        out.write("x\\n")
    return _real(self, entry, *args)
TokenEstimator._measure = measure
"""


def test_the_token_caches_outlive_a_changed_safety_margin_which_applies_at_once(
        tmp_path: Path, serve, make_fake) -> None:
    fake = make_fake()
    counted = tmp_path / "counted"
    counted.touch()
    served = serve(fake.url, prelude=_COUNTED.format(where=str(counted)),
                   models={"small-*": {"max_input_tokens": 1_000_000}}, tokens=COUNTED)
    proxy = served.proxy
    # 40 messages (each thread new to the proxy): counted once, then found in the caches.
    messages = [{"role": "user" if n % 2 == 0 else "assistant",
                 "content": f"message {n}: " + " ".join(f"w{n}x{i}" for i in range(200))}
                for n in range(40)]

    def ask(thread: str) -> int:
        answer = httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                            headers={**HEADERS, "x-thread-id": thread},
                            json={"model": "small-1", "messages": messages})
        assert answer.status_code == 200
        return int(answer.headers["x-context-tokens"])

    before = ask("t-cold")
    measured = len(counted.read_text().splitlines())
    assert measured >= 40
    assert ask("t-warm") == before and len(counted.read_text().splitlines()) == measured
    served.rewrite(models={"small-*": {"max_input_tokens": 1_000_000}},
                   tokens={**COUNTED, "safety_margin": 0.5})
    assert _reloaded(proxy, 1)["keys"] == ["tokens.safety_margin"]
    after = ask("t-margin")
    assert len(counted.read_text().splitlines()) == measured  # nothing counted anew
    assert after > before * 1.4  # the new margin, from the next request on
