"""What a new user meets first: the default config path, the start line, check-config's output,
and the `threads` table's words."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from proxy.cli_state import threads_table
from proxy.store import ThreadSummary
from tests.process import ProxyProcess, cli, write_config

ROOT = Path(__file__).resolve().parents[1]


def test_the_default_config_missing_from_the_current_directory_says_how_to_fix_it(
        tmp_path: Path) -> None:
    result = cli("check-config", cwd=str(tmp_path))
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert "cannot read config/proxy.yaml" in result.stderr
    assert (f"config/proxy.yaml is relative to the current directory ({tmp_path}): run "
            "from the project's directory, or pass --config PATH") in result.stderr


def test_a_missing_config_given_explicitly_gets_no_hint_about_the_default(tmp_path: Path) -> None:
    result = cli("check-config", "--config", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert "relative to the current directory" not in result.stderr


def test_the_threads_table_names_its_count_column_for_what_it_counts() -> None:
    summary = ThreadSummary(thread="t", tenant="a" * 32, created_at=0.0, last_activity=0.0,
                            event_count=3, last_estimate=None)
    header, row = threads_table([summary])
    assert "EVENTS" not in header
    assert row[header.index("CHECKPOINTS"):].startswith("3")


def test_what_check_config_prints_is_itself_a_valid_config(tmp_path: Path) -> None:
    # A user saves the resolved config to start from: every key it prints must be one the
    # parser takes (the shipped file has no secret, so nothing printed is masked).
    printed = cli("check-config", "--config", str(ROOT / "config" / "proxy.yaml"))
    assert printed.returncode == 0, printed.stderr
    saved = tmp_path / "resolved.yaml"
    saved.write_text(printed.stdout)
    again = cli("check-config", "--config", str(saved))
    assert again.returncode == 0, again.stderr
    assert again.stdout == printed.stdout


def test_the_listening_line_says_where_each_upstream_is(tmp_path: Path) -> None:
    # Pointed at the fake with OPENAI_UPSTREAM_URL, a new user checks here that it took.
    config = write_config(tmp_path / "p.yaml", "http://127.0.0.1:9/v1?key=sk-secret-value",
                          tmp_path / "state")
    proxy = ProxyProcess(config)
    try:
        [listening] = proxy.events("listening")
        assert listening["upstreams"] == {"fake": "http://127.0.0.1:9/v1?key=***"}
        assert b"sk-secret-value" not in b"".join(proxy.raw)
    finally:
        proxy.signal(signal.SIGTERM)
        assert proxy.wait() == 0
        proxy.kill()


@pytest.mark.parametrize("command", ["check-config", "serve", "threads"])
def test_an_empty_config_flag_is_refused_not_read_as_the_current_directory(
        tmp_path: Path, command: str) -> None:
    # `--config "$PROXY_CONFIG"` with the variable unset: the empty path was the working
    # directory, reported as "cannot read : Is a directory".
    result = cli(command, "--config", "", cwd=str(tmp_path))
    assert result.returncode == 2
    assert "argument --config: must not be empty" in result.stderr
