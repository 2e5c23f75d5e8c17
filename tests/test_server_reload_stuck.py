"""A reload that cannot finish does not hold the proxy up: a real `compaction-proxy serve`
stops within its grace while its reload's build is stuck, and a config path made a FIFO (whose
read would never end) is refused at once, the reload failing as for an invalid file."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import httpx
import pytest

from tests.process import ProxyProcess, write_config
from tests.reload_serving import serve  # noqa: F401 - the fixture
from tests.test_server_reload_off_loop import Hold

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")


def test_the_proxy_stops_within_its_grace_while_a_reload_is_stuck(tmp_path: Path,
                                                                   make_fake) -> None:
    fake = make_fake()
    state = tmp_path / "state"
    config = write_config(tmp_path / "p.yaml", fake.url, state, server={"shutdown_grace_s": 2})
    hold = Hold(tmp_path / "hold", "proxy.__main__", "_reread")  # never released
    proxy = ProxyProcess(config, prelude=hold.prelude)
    try:
        write_config(config, fake.url, state, server={"shutdown_grace_s": 2},
                     threads={"forward_headers": False})
        proxy.signal(signal.SIGHUP)
        hold.wait_held()
        proxy.signal(signal.SIGTERM)
        assert proxy.wait(10) == 0
        assert proxy.events("stopped") and not proxy.events("config_reloaded")
        [ignored] = proxy.events("config_reload_ignored")
        assert ignored["reason"] == "the proxy is shutting down"
    finally:
        proxy.kill()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_config_path_made_a_fifo_fails_the_reload_and_the_proxy_still_stops(
        serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url)
    proxy = served.proxy
    served.config.unlink()
    os.mkfifo(served.config)  # nobody writes it
    try:
        proxy.signal(signal.SIGHUP)
        [failed] = proxy.wait_for("config_reload_failed")
        assert failed["problems"] == [
            f"<file>: {served.config} is not a regular file: the config is read from a file "
            "(not a FIFO, socket or device)"]
        assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz", timeout=10).status_code == 200
    finally:
        with contextlib.suppress(OSError):  # a read blocked on it (the old code's) ends
            os.close(os.open(served.config, os.O_WRONLY | os.O_NONBLOCK))
    served.config.unlink()
    served.rewrite(threads={"forward_headers": False})  # a file again: the next reload applies
    proxy.signal(signal.SIGHUP)
    assert proxy.wait_for("config_reloaded")[0]["changed"] == ["threads"]
    proxy.signal(signal.SIGTERM)
    assert proxy.wait(20) == 0
