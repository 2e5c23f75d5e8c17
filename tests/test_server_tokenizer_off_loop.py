"""A model whose tokenizer no profile loaded at start gets it loaded by its first request, off
the event loop: that request waits for it, the others (and /healthz) go on. A real `serve`
process whose load is held on a file the test releases (`Hold`)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from proxy.tokens.encoding import encoding_name
from tests.conftest import API_KEY
from tests.process import ProxyProcess, write_config
from tests.test_server_reload_off_loop import Hold

# cl100k_base: not the default's encoding (o200k_base), so nothing loaded it at start.
UNLOADED = "gpt-4-turbo"


def _chat(proxy: ProxyProcess, model: str, thread: str) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                      json={"model": model, "messages": [{"role": "user", "content": "hi"}]},
                      headers={"authorization": f"Bearer {API_KEY}", "x-thread-id": thread})


def test_a_first_request_loading_a_tokenizer_holds_no_other_request(tmp_path: Path,
                                                                    make_fake) -> None:
    assert encoding_name(UNLOADED, None) != encoding_name("", None)
    fake = make_fake()
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state")
    hold = Hold(tmp_path / "hold", "proxy.server.estimators", "tokenizer_for", UNLOADED)
    proxy = ProxyProcess(config, prelude=hold.prelude)
    try:
        with httpx.Client() as client, ThreadPoolExecutor(1) as pool:
            first = pool.submit(_chat, proxy, UNLOADED, "t-first")
            hold.wait_held()
            # Held: the loop serves other models' requests, and health checks.
            assert client.get(f"http://127.0.0.1:{proxy.port}/healthz",
                              timeout=10).status_code == 200
            assert _chat(proxy, "small-1", "t-other").status_code == 200
            assert not first.done()
            hold.release()
            assert first.result(timeout=20).status_code == 200
        assert _chat(proxy, UNLOADED, "t-again").status_code == 200  # loaded once: not held
    finally:
        hold.release_all()
        proxy.kill()
