"""The in-process benchmark scripts still run against the code (a changed signature broke
`bench_pipeline.py` once, unnoticed): each at a tiny size, exit status 0 and its last report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.process import child_env

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@pytest.mark.parametrize(("script", "args", "said"), [
    ("bench_pipeline.py", ["--messages", "20", "--runs", "3"], "the whole Pipeline.prepare"),
    ("bench_cascade.py", ["--messages", "40", "--repeat", "5"], "warm time per request"),
    ("bench_threads.py", ["--threads", "50", "--anchors", "2", "--rounds", "2"],
     "per anchor"),
])
def test_a_benchmark_script_runs_at_a_tiny_size(script: str, args: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, str(SCRIPTS / script), *args], capture_output=True,
                          text=True, timeout=120, env=child_env())
    assert done.returncode == 0, done.stderr[-2000:]
    assert said in done.stdout
