"""What a reload keeps, in a real `compaction-proxy serve`: which upstream made each stored
response (also through a config whose routes name one upstream)."""

from __future__ import annotations

import signal
from typing import Any

import httpx
import pytest

from tests.conftest import API_KEY
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
