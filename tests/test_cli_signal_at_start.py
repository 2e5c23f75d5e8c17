"""A SIGINT or SIGTERM that arrives while `serve` opens its state (a long `quick_check`, a
migration) stops the proxy cleanly once the state is open: it does not listen, it closes its
state and its upstream client, and it says `shutting_down` and `stopped` as any stop does. A
second signal meanwhile does not wait for the state: it acts as the signal would unhandled.

SIGTERM used to kill the process outright there, and SIGINT to cancel the start half-done: no
`stopped` line, the store never closed, and asyncio's "Unclosed client session" error line."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.process import (ProxyProcess, assert_sound_database, child_env, proxy_command,
                           write_config)

# The state opens, then the start waits a while: the signal lands inside `runner.setup()`.
_SLOW_SETUP = """
import asyncio
from proxy.server.runner import ProxyRunner
_setup = ProxyRunner.setup
async def _slow_setup(self):
    await _setup(self)
    print("STATE_OPEN", flush=True)
    await asyncio.sleep(1.5)
ProxyRunner.setup = _slow_setup
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_state_opens_stops_the_proxy_cleanly(tmp_path: Path,
                                                                signum: int) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    child = subprocess.Popen(proxy_command("serve", "--config", str(config), prelude=_SLOW_SETUP),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line == b"STATE_OPEN\n":
                break
        child.send_signal(signum)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err.decode()
    events = [orjson.loads(line) for line in out.splitlines() if line.startswith(b"{")]
    names = [event["event"] for event in events]
    assert names[-2:] == ["shutting_down", "stopped"], names
    assert "listening" not in names
    assert not [event for event in events if event["level"] == "error"], events
    assert_sound_database(tmp_path / "state" / "state.db")


@pytest.mark.parametrize("signum, returncode", [(signal.SIGTERM, -signal.SIGTERM),
                                                (signal.SIGINT, 0)])
def test_a_second_signal_while_the_state_opens_does_not_wait_for_it(
        tmp_path: Path, signum: int, returncode: int) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    child = subprocess.Popen(proxy_command("serve", "--config", str(config),
                                           prelude=_SLOW_SETUP.replace("1.5", "60")),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if line == b"STATE_OPEN\n":
                break
        child.send_signal(signum)
        time.sleep(0.3)
        assert child.poll() is None  # the first one waits for the start to end
        child.send_signal(signum)
        child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == returncode


# The serving modules load once `serve` has read its config: a Ctrl-C then is a quiet stop too.
_SLOW_IMPORT = """
import importlib.abc, sys, time
class _SlowApp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "proxy.server.app":
            print("IMPORTING", flush=True)
            time.sleep(3)
        return None
sys.meta_path.insert(0, _SlowApp())
"""


def test_a_ctrl_c_while_serve_loads_its_modules_is_a_quiet_stop(tmp_path: Path) -> None:
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    child = subprocess.Popen(proxy_command("serve", "--config", str(config), prelude=_SLOW_IMPORT),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())
    try:
        assert child.stdout is not None and child.stdout.readline() == b"IMPORTING\n"
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=20)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0, err.decode()
    assert b"Traceback" not in err, err.decode()


# Once listening, the proxy sends itself two SIGTERMs in one go: both reach the loop together.
_TWO_SIGNALS_AT_ONCE = """
import asyncio, os, signal
import proxy.__main__ as serving
_listen = serving._listen
async def _listen_then_two_signals(*args):
    await _listen(*args)
    def both():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
    asyncio.get_running_loop().call_later(0.2, both)
serving._listen = _listen_then_two_signals
"""


def test_two_signals_at_once_while_serving_still_stop_it_cleanly(tmp_path: Path) -> None:
    # The second must not count as one sent while the state was still opening (which ends the
    # process at once).
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    proxy = ProxyProcess(config, prelude=_TWO_SIGNALS_AT_ONCE)
    try:
        assert proxy.wait() == 0
        assert proxy.wait_for("stopped")
    finally:
        proxy.kill()
    assert_sound_database(tmp_path / "state" / "state.db")
