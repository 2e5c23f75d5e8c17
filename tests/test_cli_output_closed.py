"""The operator's commands piped into a reader that stops early (`threads | head`): they end as
any Unix tool does when its reader goes away, quietly, with the status a shell reports for a
tool killed by SIGPIPE (141), never with a traceback.

(`inspect` and `check-config` write their output in one call, which mostly completes into the
pipe before the reader leaves: only the listing, a line at a time, shows it reliably.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store.sqlite_db import StateDb
from tests.process import child_env, write_config

THREADS = 3000  # a listing of some 200 KB: more than a pipe holds


def many_threads(state: Path) -> None:
    db = StateDb.connect(state)
    try:
        db.write(db.touch_many, [(ThreadKey("tenant-a", f"thread-{n}"), 1000.0 + n, n)
                                 for n in range(THREADS)])
    finally:
        db.close()


def first_line_then_close(*args: str) -> tuple[bytes, int, str]:
    """Run the command, read its first line, close the pipe: (line, exit status, stderr)."""
    with subprocess.Popen([sys.executable, "-m", "proxy", *args], stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, env=child_env()) as child:
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline()
        child.stdout.close()
        stderr = child.stderr.read().decode()
        return line, child.wait(60), stderr


def test_a_reader_that_stops_early_ends_the_listing_quietly(tmp_path: Path) -> None:
    many_threads(tmp_path / "state")
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    line, status, stderr = first_line_then_close("threads", "--limit", str(THREADS),
                                                 "--config", str(config))
    assert line.startswith(b"LAST ACTIVITY")  # it wrote before its reader left
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert status == 128 + signal.SIGPIPE, (status, stderr)
