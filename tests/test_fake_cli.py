"""`python -m proxy.testing`: the fake upstream run on its own for demos."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.request

import pytest

from proxy.testing.__main__ import parse_args, parse_limits


def test_limits_are_parsed_from_glob_equals_tokens() -> None:
    assert parse_limits(["small-*=8000", "a=b=10"]) == {"small-*": 8000, "a=b": 10}
    with pytest.raises(SystemExit):
        parse_limits(["small-*"])


def test_arguments_have_demo_defaults() -> None:
    args = parse_args(["--dialect", "gemini"])
    assert (args.port, args.dialect, args.overflow_style) == (9000, "gemini", "openai")


def test_module_serves_until_terminated() -> None:
    command = [sys.executable, "-m", "proxy.testing", "--port", "0", "--limit", "small-*=100"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        line = process.stderr.readline()
        url = line.rsplit(" ", 1)[-1].strip()
        assert line.startswith("fake upstream (openai) listening on http://127.0.0.1:")
        with urllib.request.urlopen(url + "/models", timeout=5) as response:
            names = [m["id"] for m in json.load(response)["data"]]
        assert names == ["fake-model"]
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        if process.stderr is not None:
            process.stderr.close()
