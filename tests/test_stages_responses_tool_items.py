"""The compaction stages on Responses tool items other than function calls (openai-python
`response_input_item_param.py`): a `computer_call_output` holds a screenshot object and a
`shell_call_output` a list of command outcomes, so microcompact's marker string cannot replace
them; a `shell_call` or `computer_call` carries an `action` object, not `arguments`, so
truncate cuts the strings inside that object."""

from __future__ import annotations

import dataclasses
from typing import Any

from proxy.core.cascade import CascadeContext, run_cascade
from proxy.settings import CompactionSettings
from proxy.testing.rules import check_responses
from tests.factories import measure, r_call, r_output, r_user, responses, wire

SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64," + "A" * 4000}


def _computer(n: int) -> list[dict[str, Any]]:
    return [{"type": "computer_call", "id": f"cu_{n}", "call_id": f"call_cu{n}",
             "status": "completed", "action": {"type": "screenshot"}, "pending_safety_checks": []},
            {"type": "computer_call_output", "call_id": f"call_cu{n}", "output": SCREENSHOT}]


def _shell(n: int, command: str = "ls") -> list[dict[str, Any]]:
    return [{"type": "shell_call", "call_id": f"call_sh{n}", "status": "completed",
             "action": {"commands": [command], "timeout_ms": 1000}},
            {"type": "shell_call_output", "call_id": f"call_sh{n}",
             "output": [{"stdout": "a.py\n" * 500, "stderr": "",
                         "outcome": {"type": "exit", "exit_code": 0}}]}]


def _idle_projection(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    settings = CompactionSettings()
    # Collapse held: `ls` through the shell is an exploration step it would fold.
    settings = dataclasses.replace(settings, microcompact=dataclasses.replace(
        settings.microcompact, keep_recent=1), collapse=dataclasses.replace(
        settings.collapse, enabled=False))
    context = CascadeContext(settings, measure=measure, keep_messages=2, now=1e9,
                             last_activity=0.0)
    return wire(run_cascade(responses(*items), context).entries)


def test_idle_microcompact_keeps_outputs_that_cannot_be_text() -> None:
    items = [r_user("Check the screen and the files.")]
    for n in range(4):
        items += [*_computer(n), *_shell(n), r_call("read_file", f"call_rf{n}", {"path": "a.py"}),
                  r_output(f"call_rf{n}", "print(1)\n" * 300)]
    items += [r_user("Go on.")]
    sent = _idle_projection(items)
    outputs = {i["call_id"]: i["output"] for i in sent if i.get("type", "").endswith("_output")}
    assert outputs["call_cu0"] == SCREENSHOT
    assert isinstance(outputs["call_sh0"], list)
    assert outputs["call_rf0"] != "print(1)\n" * 300, "text outputs are still cleared"
    assert check_responses({"model": "m", "input": sent}) is None


def test_the_fake_refuses_a_screenshot_output_that_is_text() -> None:
    call, output = _computer(0)
    found = check_responses({"model": "m", "input": [r_user(), call, {**output, "output": "x"}]})
    assert found is not None and found.body["error"]["param"] == "input[2].output"


def test_truncate_cuts_inside_the_action_of_an_old_shell_call() -> None:
    heredoc = "cat > notes.md <<'EOF'\n" + "a long line of notes\n" * 400 + "EOF"
    items = [r_user("Write the notes."), *_shell(0, heredoc), r_user("Now list them."),
             *_shell(1), r_user("Thanks."), *_shell(2), r_user("Done?")]
    sent = _idle_projection(items)
    old = sent[1]
    assert set(old) == set(items[1]), "no key added or lost"
    command = old["action"]["commands"][0]
    assert command.startswith("cat > notes.md") and len(command) < 1000
    assert old["action"]["timeout_ms"] == 1000
    assert check_responses({"model": "m", "input": sent}) is None
