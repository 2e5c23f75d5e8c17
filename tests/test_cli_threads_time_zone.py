"""`threads` shows each thread's last activity in local time with its UTC offset: the log lines
say UTC (`...Z`), and a bare local time on a machine that is not on UTC reads as hours off."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from proxy.records import ThreadKey
from proxy.store.sqlite_db import StateDb
from tests.process import child_env, write_config

AT = 1_796_220_000.0  # 2026-12-02 14:00:00 UTC


def test_the_last_activity_carries_its_utc_offset(tmp_path: Path) -> None:
    db = StateDb.connect(tmp_path / "state")
    try:
        db.write(db.touch, ThreadKey("tenant-a", "t1"), AT, 10)
    finally:
        db.close()
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1", tmp_path / "state")
    shown = {}
    for zone in ("UTC", "Asia/Kolkata"):
        result = subprocess.run([sys.executable, "-m", "proxy", "threads", "--config", str(config)],
                                capture_output=True, text=True, timeout=60,
                                env={**child_env(), "TZ": zone})
        assert result.returncode == 0, result.stderr
        shown[zone] = result.stdout.splitlines()[1]
    assert shown["UTC"].startswith("2026-12-02 14:00:00 +0000 ")
    assert shown["Asia/Kolkata"].startswith("2026-12-02 19:30:00 +0530 ")
