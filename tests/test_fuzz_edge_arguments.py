"""`scripts/fuzz_edge.py` refuses a run that could not fuzz: no time, or empty batches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "fuzz_edge.py"


@pytest.mark.parametrize(("flag", "value", "says"), [
    ("--minutes", "0", "must be more than 0"), ("--minutes", "-1", "must be more than 0"),
    ("--minutes", "ten", "expected a number"), ("--batch", "0", "must be at least 1")])
def test_a_run_that_could_not_fuzz_is_refused_before_it_starts(flag: str, value: str,
                                                               says: str) -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), flag, value], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2
    assert f"argument {flag}: {says}" in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""
