"""An output of another kind than its call (a `function_call_output` whose `call_id` is a shell
call's, or the reverse) answers that call by its id: repair keeps it as the client sent it.

Pairing by kind too was weighed and left out: the provider's messages name the
output's kind ("No tool call found for custom tool call output with call_id ...", "... shell call
output ..."), but no report found shows the provider refusing a call answered by an output of
another kind, with the request that drew it. Dropping a client's real output on that guess would
cost the model a result it may accept. Both sides (repair and the fake upstream's rules) pair by
id alone until a refusal is seen; this pins it so a change is made on purpose, with its source.
"""

from __future__ import annotations

import pytest

from proxy.core.repair import repair
from proxy.testing.rules import check_responses
from tests.factories import r_user, responses, wire
from tests.strategies_calls import call_item

_OUTPUT_KINDS = ("function_call_output", "custom_tool_call_output", "shell_call_output",
                 "apply_patch_call_output", "local_shell_call_output")


@pytest.mark.parametrize("call_kind", ["function_call", "custom_tool_call", "shell_call",
                                       "apply_patch_call", "local_shell_call"])
@pytest.mark.parametrize("output_kind", _OUTPUT_KINDS)
def test_an_output_answers_its_call_by_id_whatever_its_kind(call_kind: str, output_kind: str) -> None:
    output = {"type": output_kind, "call_id": "call_0",
              "output": [{"stdout": "x", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]
              if output_kind == "shell_call_output" else "ok"}
    entries = responses(r_user("go"), call_item(call_kind, "call_0", "a", 0), output, r_user("next"))
    out = repair(entries)
    assert out.entries is entries and out.changed == 0
    assert check_responses({"model": "m", "input": wire(out.entries)}) is None
