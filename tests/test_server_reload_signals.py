"""SIGHUP at the edges of a real `compaction-proxy serve`'s life: while it starts (remembered,
then the reload runs once it serves), while it stops (ignored), and `logging.level` changed by
a reload (its own lines written whichever way it moves)."""

from __future__ import annotations

import signal
import subprocess
import threading
from pathlib import Path

import httpx
import pytest

from proxy.testing.replies import Reply
from tests.conftest import API_KEY
from tests.process import ProxyProcess, child_env, proxy_command, write_config
from tests.reload_serving import serve  # noqa: F401 - the fixture

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")

HEADERS = {"authorization": f"Bearer {API_KEY}"}


def _chat(proxy: ProxyProcess, thread: str, **options: object) -> httpx.Response:
    return httpx.post(f"{proxy.base_url}/chat/completions", timeout=20,
                      headers={**HEADERS, "x-thread-id": thread},
                      json={"model": "small-1", "messages": [{"role": "user", "content": "hi"}],
                            **options})


# The file changes while the proxy starts, and the operator says so twice: once while the
# serving modules load (before the loop runs), once while the state opens (on the loop).
_STARTING = """
import os, pathlib, signal
import proxy.server.app as app
from proxy.server.pipeline import Pipeline
_build, _start = app.build_app, Pipeline.start
def build_app(settings, **options):
    pathlib.Path({config!r}).write_text({changed!r})
    os.kill(os.getpid(), signal.SIGHUP)
    return _build(settings, **options)
async def start(self):
    os.kill(os.getpid(), signal.SIGHUP)
    await _start(self)
app.build_app, Pipeline.start = build_app, start
"""


def test_a_sighup_while_the_proxy_starts_reloads_once_it_serves(tmp_path: Path, make_fake) -> None:
    fake = make_fake()
    state = tmp_path / "state"
    changed = write_config(tmp_path / "changed.yaml", fake.url, state,
                     threads={"forward_headers": False}).read_text()
    config = write_config(tmp_path / "p.yaml", fake.url, state)
    proxy = ProxyProcess(config, prelude=_STARTING.format(config=str(config), changed=changed))
    try:
        [line] = proxy.wait_for("config_reloaded")
        assert line["changed"] == ["threads"]
        names = [event["event"] for event in proxy.lines]
        assert names.index("listening") < names.index("config_reloaded")
        assert _chat(proxy, "t-start").status_code == 200
        assert "x-thread-id" not in fake.requests[-1].headers
        assert len(proxy.events("config_reloaded")) == 1
    finally:
        proxy.kill()


def test_a_sighup_during_the_shutdown_is_ignored(serve, make_fake) -> None:
    fake = make_fake(chunk_delay=0.01)
    fake.responder = lambda recorded: Reply.text(" ".join(f"w{i}" for i in range(150)))
    served = serve(fake.url)
    proxy = served.proxy
    answers: list[httpx.Response] = []
    streaming = threading.Thread(target=lambda: answers.append(
        _chat(proxy, "t-stream", stream=True)))
    streaming.start()
    while not fake.requests:  # the stream is under way
        threading.Event().wait(0.01)
    served.rewrite(threads={"forward_headers": False})
    proxy.signal(signal.SIGTERM)
    proxy.wait_for("shutting_down")
    proxy.signal(signal.SIGHUP)
    proxy.wait_for("config_reload_ignored")
    streaming.join(20)
    assert proxy.wait(20) == 0
    assert answers[0].status_code == 200 and answers[0].text.endswith("data: [DONE]\n\n")
    assert proxy.wait_for("stopped") and not proxy.events("config_reloaded")


def test_a_reloaded_log_level_applies_to_the_next_lines_and_its_own_line_is_written(
        serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url)
    proxy = served.proxy
    # Raised: the reload's own line is written under the level it began with...
    served.rewrite(logging={"level": "warning"})
    proxy.signal(signal.SIGHUP)
    [raised] = proxy.wait_for("config_reloaded")
    assert raised["changed"] == ["logging"] and raised["level"] == "info"
    assert _chat(proxy, "t-quiet").status_code == 200  # ...the next lines under the new
    # Lowered: under the new level.
    served.rewrite(logging={"level": "info"})
    proxy.signal(signal.SIGHUP)
    assert proxy.wait_for("config_reloaded", 2)[1]["changed"] == ["logging"]
    assert _chat(proxy, "t-heard").status_code == 200
    assert [line["thread"] for line in proxy.wait_for("request")] == ["t-heard"]
    assert len(proxy.events("config_reloaded")) == 2


def test_a_reload_that_raises_the_level_to_error_still_names_what_waits_for_a_restart(
        serve, make_fake) -> None:
    fake = make_fake()
    served = serve(fake.url)
    proxy = served.proxy
    served.rewrite(logging={"level": "error", "format": "console"})
    proxy.signal(signal.SIGHUP)
    [partial] = proxy.wait_for("config_reload_partial")
    assert partial["restart_needed"] == ["logging.format"]
    assert proxy.events("config_reloaded")[0]["changed"] == ["logging"]


# SIGHUP while `serve`'s own modules load (PyYAML first of the slow ones): before the proxy's
# handler exists. Its default action used to end the process there, with no line.
_HUP_WHILE_IMPORTING = """
import importlib.abc, os, signal, sys
class _HupOnYaml(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "yaml":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGHUP)
        return None
sys.meta_path.insert(0, _HupOnYaml())
"""


def test_a_sighup_while_serve_loads_its_modules_reloads_once_it_serves(
        tmp_path: Path, make_fake) -> None:
    fake = make_fake()
    config = write_config(tmp_path / "p.yaml", fake.url, tmp_path / "state")
    proxy = ProxyProcess(config, prelude=_HUP_WHILE_IMPORTING)
    try:
        [line] = proxy.wait_for("config_reloaded")
        names = [event["event"] for event in proxy.lines]
        assert names.index("listening") < names.index("config_reloaded")
        assert _chat(proxy, "t-early").status_code == 200
    finally:
        proxy.kill()


def test_a_sighup_while_another_command_loads_acts_as_it_would_unhandled(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    done = subprocess.run(proxy_command("check-config", "--config", str(config),
                                        prelude=_HUP_WHILE_IMPORTING),
                          capture_output=True, timeout=60, env=child_env())
    assert done.returncode == -signal.SIGHUP, done.stderr.decode()


def test_sighups_all_through_the_stop_never_end_the_process(tmp_path: Path) -> None:
    # Closing the loop, then the interpreter's own exit, gave SIGHUP its default action back:
    # one in the stop's last moments ended the process after `stopped` (-SIGHUP, not 0).
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    proxy = ProxyProcess(config)
    try:
        proxy.signal(signal.SIGTERM)
        while proxy.process.poll() is None:
            try:
                proxy.signal(signal.SIGHUP)
            except ProcessLookupError:
                break
            threading.Event().wait(0.001)
        assert proxy.wait(20) == 0
        assert proxy.wait_for("stopped")
    finally:
        proxy.kill()
