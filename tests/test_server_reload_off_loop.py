"""A SIGHUP reload does its slow work (the file read and checked, the new pipeline built, a
new profile's tokenizer loaded) off the event loop: requests and streams under way go on
meanwhile. A real `compaction-proxy serve` whose reload is held at one of those steps, on a
file the test releases: /healthz answers and a stream runs to its end while it is held."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import openai
import pytest

from proxy.testing.replies import Reply
from tests.conftest import API_KEY
from tests.process import ProxyProcess, write_config

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")

LONG = " ".join(f"word{i}" for i in range(150))

# `module.name` wrapped: a call (with `only` among its arguments, if given) says it is held,
# then waits for the release file. Each call is numbered: held-1, release-1, held-2, ...
_HOLD = """
import itertools, pathlib, time
import {module} as target
_real, _calls = target.{name}, itertools.count(1)
def held(*args, **kwargs):
    if {only!r} is None or {only!r} in args:
        n = next(_calls)
        pathlib.Path({where!r}, f"held-{{n}}").touch()
        while not pathlib.Path({where!r}, f"release-{{n}}").exists():
            time.sleep(0.01)
    return _real(*args, **kwargs)
target.{name} = held
"""


class Hold:
    """The proxy's step `module.name`, held at each call until the test releases it."""

    def __init__(self, where: Path, module: str, name: str, only: str | None = None) -> None:
        self.where = where
        where.mkdir()
        self.prelude = _HOLD.format(module=module, name=name, only=only, where=str(where))

    def wait_held(self, n: int = 1) -> None:
        held = self.where / f"held-{n}"
        for _ in range(1000):
            if held.exists():
                return
            threading.Event().wait(0.01)
        raise TimeoutError(f"step not reached: {held}")

    def release(self, n: int = 1) -> None:
        (self.where / f"release-{n}").touch()

    def release_all(self) -> None:
        for n in range(1, 10):
            self.release(n)


STEPS = {
    # what the reload holds: (module, function, only when called with, the file's change)
    "file read": ("proxy.__main__", "_reread", None, {"threads": {"forward_headers": False}}),
    "pipeline built": ("proxy.server.reload", "reconfigured", None,
                       {"threads": {"forward_headers": False}}),
    "tokenizer loaded": ("proxy.server.estimators", "tokenizer_for", "r50k_base",
                         {"models": {"legacy-*": {"tokenizer": "r50k_base"}}}),
}


@pytest.mark.parametrize("step", STEPS)
def test_requests_and_streams_go_on_while_a_reload_is_held(
        tmp_path: Path, make_fake, step: str) -> None:
    module, name, only, change = STEPS[step]
    fake = make_fake(chunk_delay=0.01)
    fake.responder = lambda recorded: Reply.text(LONG)
    state = tmp_path / "state"
    config = write_config(tmp_path / "p.yaml", fake.url, state)
    hold = Hold(tmp_path / "hold", module, name, only)
    proxy = ProxyProcess(config, prelude=hold.prelude)
    try:
        client = openai.OpenAI(base_url=proxy.base_url, api_key=API_KEY, max_retries=0,
                               timeout=20, default_headers={"x-thread-id": "t-stream"})
        with client, client.chat.completions.create(
                model="small-1", stream=True,
                messages=[{"role": "user", "content": "long"}]) as stream:
            chunks = iter(stream)
            text = next(chunks).choices[0].delta.content or ""
            write_config(config, fake.url, state, **change)
            proxy.signal(signal.SIGHUP)
            hold.wait_held()
            # Held: the loop serves, and the stream runs to its end.
            assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz",
                             timeout=10).status_code == 200
            text += "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == LONG
        assert not proxy.events("config_reloaded")  # nothing in force before it is built
        hold.release()
        [line] = proxy.wait_for("config_reloaded")
        assert line["changed"] == list(change)
    finally:
        hold.release_all()
        proxy.kill()


def test_signals_during_a_held_reload_make_exactly_one_more(tmp_path: Path, make_fake) -> None:
    fake = make_fake()
    state = tmp_path / "state"
    config = write_config(tmp_path / "p.yaml", fake.url, state)
    hold = Hold(tmp_path / "hold", "proxy.__main__", "_reread")
    proxy = ProxyProcess(config, prelude=hold.prelude)
    try:
        write_config(config, fake.url, state, threads={"forward_headers": False})
        proxy.signal(signal.SIGHUP)
        hold.wait_held(1)
        proxy.signal(signal.SIGHUP)
        proxy.signal(signal.SIGHUP)
        assert httpx.get(f"http://127.0.0.1:{proxy.port}/healthz", timeout=10).status_code == 200
        hold.release(1)
        hold.wait_held(2)  # the one more, its file unchanged since
        hold.release(2)
        first, second = proxy.wait_for("config_reloaded", 2)
        assert first["changed"] == ["threads"] and second["changed"] == []
        # The next reload is the next signal's: a third queued one would have read the file
        # before this change.
        write_config(config, fake.url, state, threads={"forward_headers": True})
        proxy.signal(signal.SIGHUP)
        hold.wait_held(3)
        hold.release(3)
        third = proxy.wait_for("config_reloaded", 3)[2]
        assert third["changed"] == ["threads"]
    finally:
        hold.release_all()
        proxy.kill()
