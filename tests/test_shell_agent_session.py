"""OpenHands- and Codex-style sessions, which explore only through their shell tool (cat,
sed -n, grep, find, ls), through the proxy with a small window: old exploration runs reach the
model collapsed, and after the summary the files they printed come back."""

from __future__ import annotations

import shlex
from typing import Any

import orjson
import pytest

from proxy.testing.sessions import coding_session
from proxy.testing.summarizer import FakeSummarizer
from tests.compaction_session import LIMIT, replay, summary_of

MODELS = {"small-*": {"max_input_tokens": LIMIT}}
TRAILER = "\n[The command completed with exit code {code}.]\n[Current working directory: /workspace]"


def _command(name: str, args: dict[str, Any]) -> str | None:
    """The shell line an OpenHands agent would run for the synthetic session's call."""
    if name == "read_file":
        path = shlex.quote(args["path"])
        if "start_line" in args:
            return f"sed -n '{args['start_line']},{args['end_line']}p' {path}"
        return f"cat {path}"
    if name == "grep":
        return f"grep -rn {shlex.quote(args['pattern'])} {shlex.quote(args.get('path', '.'))}"
    if name == "glob":
        return f"find . -path {shlex.quote('./' + args['pattern'])}"
    if name == "list_dir":
        return f"ls -la {shlex.quote(args['path'])}"
    if name == "bash":
        return args["command"]
    return None


def _wrapped(style: str, output: str, code: int) -> str:
    if style == "codex":
        return orjson.dumps({"output": output, "metadata": {"exit_code": code,
                                                            "duration_seconds": 0.3}}).decode()
    return output + TRAILER.format(code=code)


def _shell_call(style: str, command: str) -> tuple[str, str]:
    if style == "codex":
        return "shell", orjson.dumps({"command": ["bash", "-lc", command],
                                      "workdir": "/workspace"}).decode()
    return "execute_bash", orjson.dumps({"command": command}).decode()


def shell_style(messages: list[dict[str, Any]], style: str = "openhands") -> list[dict[str, Any]]:
    """The session with its reads, searches, listings and test runs made shell calls."""
    codes: dict[str, int] = {}
    out = []
    for message in messages:
        if message.get("tool_calls"):
            calls = []
            for call in message["tool_calls"]:
                command = _command(call["function"]["name"], orjson.loads(call["function"]["arguments"]))
                if command is not None:
                    codes[call["id"]] = 1 if "pytest" in command else 0
                    name, arguments = _shell_call(style, command)
                    call = {**call, "function": {"name": name, "arguments": arguments}}
                calls.append(call)
            message = {**message, "tool_calls": calls}
        elif message.get("role") == "tool" and message["tool_call_id"] in codes:
            code = codes[message["tool_call_id"]]
            message = {**message, "content": _wrapped(style, message["content"], code)}
        out.append(message)
    return out


@pytest.fixture
def small(make_fake, make_proxy):
    fake = make_fake(limits={"small-*": LIMIT})
    FakeSummarizer.install(fake)
    return fake, make_proxy(fake, models=MODELS)


@pytest.mark.parametrize(("style", "tool"), [("openhands", "execute_bash"), ("codex", "shell")])
def test_shell_exploration_collapses_and_printed_files_come_back(small, style: str, tool: str) -> None:
    fake, proxy = small
    messages = shell_style(coding_session(160, seed=11), style)
    names = {c["function"]["name"] for m in messages for c in m.get("tool_calls", ())}
    assert tool in names and "read_file" not in names and "grep" not in names
    run = replay(proxy.base_url, fake, messages, f"{style}-style")
    assert proxy.logs.events("compaction_completed"), "the session never compacted"
    records = {m["content"] for body in run.upstream for m in orjson.loads(body)["messages"]
               if isinstance(m.get("content"), str) and "earlier exploration call" in m["content"]}
    lines = [line for record in records for line in record.splitlines()[1:]]
    assert any(line.startswith(f"- {tool} ") and "sed -n" in line for line in lines)
    assert any(line.startswith(f"- {tool} ") and "grep -rn" in line for line in lines)
    assert not any("pytest" in line for line in lines)  # a test run is no exploration
    summarized = [body for body in run.upstream if summary_of(body) is not None]
    restored = [m["content"] for body in summarized for m in orjson.loads(body)["messages"]
                if isinstance(m.get("content"), str)
                and m["content"].startswith("Restored after context compaction: the latest content")]
    assert any(f"earlier with {tool}" in text for text in restored), "no file restored"
    assert not any("[The command completed" in text or '"exit_code"' in text for text in restored)
