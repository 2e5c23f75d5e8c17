"""Repair answers an interrupted call of every client-run Responses tool, not only function
calls: a local shell, shell or apply-patch call left without its output is refused upstream
("No tool output found for local shell call call_...", openai/openai-agents-python#1855), so it
gets the cancelled output in the shape of its own output type."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.core.collapse import exploration_runs
from proxy.core.repair import CANCELLED_TEXT, is_cancelled, repair
from proxy.settings import CollapseSettings
from proxy.testing.rules import check_responses
from tests.factories import r_call, r_output, r_reasoning, r_user, responses, wire

CALLS: dict[str, dict[str, Any]] = {
    "local_shell_call": {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_1",
                         "status": "completed",
                         "action": {"type": "exec", "command": ["sleep", "99"], "env": {}}},
    "shell_call": {"type": "shell_call", "call_id": "call_1", "status": "completed",
                   "action": {"commands": ["sleep 99"]}},
    "apply_patch_call": {"type": "apply_patch_call", "call_id": "call_1", "status": "completed",
                         "operation": {"type": "delete_file", "path": "old.py"}},
}


@pytest.mark.parametrize("kind", sorted(CALLS))
def test_an_interrupted_client_run_call_gets_a_cancelled_output(kind: str) -> None:
    before = [r_user("Run it."), CALLS[kind], r_user("Stop; do something else.")]
    assert "No tool output found" in check_responses({"model": "m", "input": before}).body[
        "error"]["message"]
    out = repair(responses(*before))
    sent = wire(out.entries)
    assert out.cancelled == 1
    output = sent[2]
    assert output["type"] == f"{kind}_output" and output["call_id"] == "call_1"
    assert CANCELLED_TEXT in str(output["output"])
    assert check_responses({"model": "m", "input": sent}) is None
    assert repair(out.entries).entries == out.entries, "the answer counts as an answer"


def test_a_shell_output_is_a_list_of_outcomes_and_a_patch_output_has_a_status() -> None:
    shell = wire(repair(responses(r_user(), CALLS["shell_call"], r_user("x"))).entries)[2]
    assert shell["output"][0]["stderr"] == CANCELLED_TEXT
    assert shell["output"][0]["outcome"]["type"] == "exit"
    patch = wire(repair(responses(r_user(), CALLS["apply_patch_call"], r_user("x"))).entries)[2]
    assert patch["status"] == "failed" and patch["output"] == CANCELLED_TEXT


def test_a_local_shell_output_naming_its_call_in_id_answers_it() -> None:
    """The SDK types name the call of a `local_shell_call_output` in `id`: that output answers
    its call, so repair makes no cancelled output beside it."""
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_sh", "status": "completed",
             "action": {"type": "exec", "command": ["ls"], "env": {}}}
    listing = {"type": "local_shell_call_output", "id": "call_sh", "output": "a.py"}
    entries = responses(r_user(), shell, listing, r_user("next"))
    assert repair(entries).entries is entries


def test_a_cancelled_output_gone_with_its_reasoning_item_is_not_counted() -> None:
    """A `local_shell_call` cannot lose its id: when its reasoning item goes (here an earlier
    call's output sits between them), the call goes with it, and so does the cancelled output
    made for it. What repair reports is what it sent: no cancelled output, two client items
    gone (the reasoning item and the call), not three."""
    shell = CALLS["local_shell_call"]
    entries = responses(r_user("Run it."), r_call("grep", "call_a"), r_reasoning("rs_1"),
                        r_output("call_a"), shell, r_user("Stop."))
    out = repair(entries)
    sent = wire(out.entries)
    assert [e.get("type") for e in sent] == ["message", "function_call", "function_call_output", "message"]
    assert CANCELLED_TEXT not in str(sent)
    assert (out.cancelled, out.dropped_reasoning, out.dropped_items) == (0, 1, 1)
    assert out.changed == 2
    assert check_responses({"model": "m", "input": sent}) is None


def test_a_later_call_with_the_id_of_a_call_gone_with_its_reasoning_keeps_its_output() -> None:
    """Servers that number calls per response use `call_0` again in a later turn. The local
    shell call `call_0` goes with its reasoning item, and its output with it; the later
    `function_call` `call_0` is another call, and its own output must stay, or upstream
    refuses the list ("No tool output found for function call call_0")."""
    shell = {**CALLS["local_shell_call"], "call_id": "call_0"}
    entries = responses(r_user("a"), r_call("grep", "call_x"), r_reasoning("rs_1"), r_output("call_x"),
                        shell, {"type": "local_shell_call_output", "call_id": "call_0", "output": "ok"},
                        r_user("b"), r_call("grep", "call_0"), r_output("call_0"), r_user("c"))
    out = repair(entries)
    assert out.origins == (0, 1, 3, 6, 7, 8, 9)
    assert (out.dropped_reasoning, out.dropped_items) == (1, 2)
    assert check_responses({"model": "m", "input": wire(out.entries)}) is None


def test_a_cancelled_shell_output_reads_as_cancelled_and_breaks_an_exploration_run() -> None:
    """A `shell_call`'s cancelled output is a list of outcomes, the text in `stderr`: it is
    still a cancellation, so collapse never folds the interrupted read into its record as a
    call that ran and failed (SPEC §4.1: a run is of completed calls)."""
    def step(call_id: str, command: str, answered: bool = True) -> list[dict[str, Any]]:
        call = {"type": "shell_call", "call_id": call_id, "status": "completed",
                "action": {"commands": [command]}}
        output = {"type": "shell_call_output", "call_id": call_id,
                  "output": [{"stdout": "x\n" * 50, "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}
        return [r_reasoning(f"rs_{call_id}"), call, *([output] if answered else [])]

    out = repair(responses(r_user("go"), *step("a", "ls src", answered=False), *step("b", "cat a.py"),
                           *step("c", "cat b.py"), r_user("next")))
    made = out.entries[out.origins.index(None)]
    assert is_cancelled(made)
    settings = CollapseSettings()
    runs = exploration_runs(out.entries, settings.tools, None, settings.shell_tools)
    assert [[g.start for g in run.groups] for run in runs] == [[4, 7]]  # b and c, not a
