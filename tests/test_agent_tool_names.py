"""The cheap stages on the tool names and arguments real coding agents use.

Each session is one agent's own exploration calls (a run of three steps), a read of a file
and a plan update, with names and argument keys as that agent sends them. With the default
settings the run collapses keeping its paths and queries, and after a summary the read file
and the plan come back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from proxy.compaction.cutoff import PARTIAL, Cutoff
from proxy.compaction.restore import collect
from proxy.conversation import Api, content_text
from proxy.core.collapse import collapse
from proxy.settings import RestoreSettings
from tests.factories import stage_context
from tests.test_compaction_support import (assistant, assistant_calls, conv, count, tool_result,
                                           user)

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class Agent:
    name: str
    explore: tuple[Call, Call, Call]  # three exploration steps, in order
    kept: tuple[str, ...]  # argument values of the first two (folded) steps the record keeps
    read: Call  # a read of FILE
    plan: Call | None  # a plan / TODO update


FILE = "src/app.py"
AGENTS = (
    Agent("codex-cli",
          (("list_dir", {"dir_path": "src", "depth": 2}),
           ("grep_files", {"pattern": "def main", "path": "src"}),
           ("read_file", {"file_path": "src/cli.py", "offset": 1, "limit": 40})),
          ("def main", "src/cli.py"),
          ("read_file", {"file_path": FILE}),
          ("update_plan", {"plan": [{"step": "fix main", "status": "in_progress"}]})),
    Agent("opencode",
          (("glob", {"pattern": "**/*.py"}),
           ("grep", {"pattern": "def main", "path": "src", "include": "*.py"}),
           ("list", {"path": "src"})),
          ("**/*.py", "def main"),
          ("read", {"filePath": FILE, "offset": 0, "limit": 200}),
          ("todowrite", {"todos": [{"content": "fix main", "status": "in_progress"}]})),
    Agent("cline-roo",
          (("list_files", {"path": "src", "recursive": True}),
           ("search_files", {"path": "src", "regex": "def main", "file_pattern": "*.py"}),
           ("list_code_definition_names", {"path": "src"})),
          ("def main", "*.py"),
          ("read_file", {"path": FILE}),
          ("update_todo_list", {"todos": "[-] fix main\n[ ] add a test"})),
    Agent("continue",
          (("ls", {"dirPath": "src", "recursive": False}),
           ("grep_search", {"query": "def main"}),
           ("file_glob_search", {"pattern": "**/*.py"})),
          ("src", "def main"),
          ("read_file", {"filepath": FILE}),
          None),
    Agent("openhands",
          (("str_replace_editor", {"command": "view", "path": "/workspace/src"}),
           ("str_replace_editor", {"command": "view", "path": "/workspace/src/cli.py",
                                   "view_range": [1, 40]}),
           ("str_replace_editor", {"command": "view", "path": "/workspace/src/db.py"})),
          ("/workspace/src/cli.py",),
          ("str_replace_editor", {"command": "view", "path": FILE}),
          ("task_tracker", {"command": "plan",
                            "task_list": [{"id": "1", "title": "fix main", "status": "todo"}]})),
    Agent("claude-code-style",
          (("Glob", {"pattern": "**/*.py"}),
           ("Grep", {"pattern": "def main", "path": "src", "output_mode": "content"}),
           ("LS", {"path": "/repo/src"})),
          ("**/*.py", "def main"),
          ("Read", {"file_path": FILE, "offset": 1, "limit": 2000}),
          ("TodoWrite", {"todos": [{"content": "fix main", "status": "in_progress",
                                    "activeForm": "Fixing main"}]})),
    Agent("gemini-cli",
          (("google_web_search", {"query": "python argparse subcommands"}),
           ("search_file_content", {"pattern": "def main", "include": "*.py"}),
           ("list_directory", {"dir_path": "src"})),
          ("def main", "python argparse subcommands"),
          ("read_file", {"absolute_path": f"/repo/{FILE}"}),
          ("write_todos", {"todos": [{"description": "fix main", "status": "in_progress"}]})),
)


def _steps(calls: tuple[Call, ...], prefix: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for n, (name, args) in enumerate(calls):
        out += [assistant_calls((f"{prefix}{n}", name, args)),
                tool_result(f"{prefix}{n}", f"src/cli.py:{n + 3}:def main():\nresult {n}\n"
                            + "    a line of what the tool found\n" * 40)]
    return out


def _session(agent: Agent) -> list[dict[str, Any]]:
    plan = [] if agent.plan is None else _steps((agent.plan,), "p")
    name, args = agent.read
    return [user("find the bug in main"), *_steps(agent.explore, "x"), assistant("Found it."),
            *plan, assistant_calls(("r0", name, args)), tool_result("r0", "def main():\n    run()\n"),
            assistant("Reading done."), user("now fix it")]


@pytest.mark.parametrize("agent", AGENTS, ids=lambda a: a.name)
def test_exploration_run_collapses_keeping_paths_and_queries(agent: Agent) -> None:
    entries = conv(Api.CHAT, _session(agent))
    out = collapse(entries, stage_context(entries, tail=2))
    assert out.report.changed == 4, f"{agent.name}: the run was not collapsed"
    record = content_text(out.entries[1])
    for value in agent.kept:
        assert value in record


@pytest.mark.parametrize("agent", AGENTS, ids=lambda a: a.name)
def test_read_file_and_plan_are_restored_after_a_summary(agent: Agent) -> None:
    entries = conv(Api.CHAT, _session(agent))
    cutoff = Cutoff(index=len(entries) - 1, lead=0, start=0, strategy=PARTIAL)
    restored = collect(entries, cutoff, RestoreSettings(), count)
    assert any(p.endswith(FILE) for p in restored.file_paths), f"{agent.name}: file not restored"
    assert "def main():\n    run()" in "\n".join(m["content"] for m in restored.files)
    if agent.plan is not None:
        assert restored.plan and "fix main" in restored.plan[0]["content"]
