"""A compaction prepares its summary (the cutoff, the restores, the transcript rendered and
chunked for the summarizer) in a worker thread: on a big thread that is tens of ms of CPU, and
on the event loop it held every other request and stream. A real `serve` process whose
preparation is held (`Hold`, at `plan_summary`) on a file the test releases: /healthz answers
while it is held, and the compaction then completes as before."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import orjson

from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, MODEL, planted_session
from tests.conftest import API_KEY
from tests.process import ProxyProcess, write_config
from tests.test_server_reload_off_loop import Hold


def _send(proxy: ProxyProcess, messages: list[dict]) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=30,
                      content=orjson.dumps({"model": MODEL, "messages": messages}),
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": "t-prep",
                               "content-type": "application/json"})


def test_a_compaction_preparing_its_summary_holds_no_other_request(tmp_path: Path,
                                                                   make_fake) -> None:
    fake = make_fake(limits={"small-*": LIMIT})
    summarizer = FakeSummarizer.install(fake)
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state",
                          models={"small-*": {"max_input_tokens": LIMIT}})
    messages, _ = planted_session(200)
    end = max(k for k in range(1, len(messages)) if messages[k]["role"] == "assistant")
    hold = Hold(tmp_path / "hold", "proxy.compaction.summarizer", "plan_summary")
    proxy = ProxyProcess(config, prelude=hold.prelude)
    try:
        with ThreadPoolExecutor(1) as pool:
            over = pool.submit(_send, proxy, messages[:end])  # over the trigger: it compacts
            hold.wait_held()
            # Held: the loop serves health checks.
            assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz",
                             timeout=5).status_code == 200
            assert not over.done() and summarizer.calls == 0
            hold.release()
            answer = over.result(timeout=30)
        assert answer.status_code == 200
        assert answer.headers["x-compaction"] == "compacted"
        assert summarizer.calls >= 1
    finally:
        hold.release_all()
        proxy.kill()
