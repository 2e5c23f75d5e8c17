"""Each command's help names its arguments as the README's CLI table writes them, and says
what every one of them is."""

from __future__ import annotations

import pytest

from proxy.__main__ import main


def help_of(command: str, capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main([command, "--help"])
    assert done.value.code == 0
    return capsys.readouterr().out


@pytest.mark.parametrize(("command", "usage"), [
    ("serve", "serve [-h] [--host H] [--port P] [--config PATH]"),
    ("check-config", "check-config [-h] [--config PATH]"),
    ("threads", "threads [-h] [--limit N] [--config PATH]"),
    ("inspect", "inspect [-h] [--config PATH] THREAD_ID"),
    ("check-state", "check-state [-h] [--config PATH]")])
def test_the_usage_line_writes_the_arguments_as_the_readme_does(
        command: str, usage: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert f"usage: compaction-proxy {usage}\n" in help_of(command, capsys)


def test_the_thread_id_argument_says_where_to_find_one(capsys: pytest.CaptureFixture[str]) -> None:
    text = help_of("inspect", capsys)
    [line] = [line for line in text.splitlines() if line.lstrip().startswith("THREAD_ID")]
    assert line.split(None, 1)[1] == "a thread id exactly as `compaction-proxy threads` shows it"
