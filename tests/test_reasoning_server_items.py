"""Server-side Responses items (`web_search_call`, `mcp_call`, ...) when their reasoning item goes.

Their `id` is required, and kept without its reasoning item it is refused, so they go with it
(with the outputs answering them); items whose own reasoning item stays keep their id.
"""

from __future__ import annotations

from typing import Any

from proxy.compaction.transcript import render_blocks
from proxy.core.repair import repair
from proxy.core.sanitize import Policy, sanitize
from proxy.testing.rules import check_responses
from proxy.testing.signing import DEFAULT_SIGNER as S
from tests.factories import r_assistant, r_call, r_output, r_reasoning, r_user, responses, wire

NONCE = "0123456789abcdef01234567"
LATER = "89abcdef0123456789abcdef"


def _search(nonce: str = NONCE, index: int = 1) -> dict[str, Any]:
    return {"type": "web_search_call", "id": S.item_id("ws", nonce, index, reasoned=True),
            "status": "completed", "action": {"type": "search", "query": "aiohttp release"}}


def _types(items: list[dict[str, Any]]) -> list[str]:
    return [i.get("type") or "message" for i in items]


def test_a_past_search_goes_with_its_reasoning_item() -> None:
    entries = responses(r_user("Look it up."), r_reasoning(S.reasoning_id(NONCE)), _search(),
                        r_assistant("Found it.", id=S.item_id("msg", NONCE, 2, reasoned=True)),
                        r_user("Thanks, go on."))
    out = sanitize(entries, Policy.CHEAP, changed_at=0)
    sent = wire(out.entries)
    assert _types(sent) == ["message", "message", "message"]
    assert "id" not in sent[1]
    assert out.items_dropped == 1
    assert check_responses({"model": "m", "input": sent}) is None


def test_before_the_fix_the_search_lost_its_required_id() -> None:
    """What the fake now refuses: the shape the proxy used to send."""
    bare = {k: v for k, v in _search().items() if k != "id"}
    found = check_responses({"model": "m", "input": [r_user(), bare]})
    assert found is not None and found.body["error"]["param"] == "input[1].id"
    assert found.body["error"]["code"] == "missing_required_parameter"


def test_a_search_kept_with_its_id_needs_its_reasoning_item() -> None:
    found = check_responses({"model": "m", "input": [r_user(), _search(), r_assistant()]})
    assert found is not None
    assert "of type 'web_search_call' was provided without its required 'reasoning' item" in \
        found.body["error"]["message"]


def test_a_search_whose_own_reasoning_stays_keeps_its_id() -> None:
    """Repair drops a reasoning item left unfollowed; the next one owns the search."""
    entries = responses(r_user(), r_reasoning("rs_dangling"), r_reasoning(S.reasoning_id(LATER)),
                        _search(LATER), r_assistant("Found.", id="msg_1"))
    out = repair(entries)
    sent = wire(out.entries)
    assert _types(sent) == ["message", "reasoning", "web_search_call", "message"]
    assert sent[2]["id"] == _search(LATER)["id"]
    assert out.dropped_reasoning == 1 and out.dropped_items == 0


def test_outputs_answering_a_dropped_server_call_go_too() -> None:
    computer = {"type": "computer_call", "id": "cu_1", "call_id": "call_cu", "status": "completed",
                "action": {"type": "screenshot"}, "pending_safety_checks": []}
    shot = {"type": "computer_call_output", "call_id": "call_cu",
            "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AA"}}
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_sh", "status": "completed",
             "action": {"type": "exec", "command": ["ls"], "env": {}}}
    listing = {"type": "local_shell_call_output", "id": "call_sh", "output": "a.py"}
    tools = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []}
    ask = {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "docs",
           "name": "fetch", "arguments": "{}"}
    yes = {"type": "mcp_approval_response", "approval_request_id": "mcpr_1", "approve": True}
    entries = responses(r_user(), r_reasoning("rs_1"), computer, shot, r_reasoning("rs_2"), shell,
                        listing, r_reasoning("rs_3"), tools, r_reasoning("rs_4"), ask, yes,
                        r_call("read_file", "call_f", id="fc_1"), r_output("call_f"),
                        r_user("Next."))
    out = sanitize(entries, Policy.CHEAP)
    sent = wire(out.entries)
    assert _types(sent) == ["message", "function_call", "function_call_output", "message"]
    assert "id" not in sent[1]
    assert out.items_dropped == 7
    assert check_responses({"model": "m", "input": sent}) is None


def test_mcp_list_tools_follows_its_reasoning_item() -> None:
    tools = {"type": "mcp_list_tools", "id": "mcpl_1", "server_label": "docs", "tools": []}
    entries = responses(r_user(), r_reasoning("rs_1"), tools, r_assistant("Listed."))
    assert repair(entries).entries is entries
    assert check_responses({"model": "m", "input": wire(entries)}) is None


def test_a_transcript_or_history_file_keeps_the_server_items() -> None:
    """Not sent as items: the summarizer and the history file keep the searches and the shell
    calls, without ids, as they keep everything else."""
    shell = {"type": "local_shell_call", "id": "lsh_1", "call_id": "call_sh", "status": "completed",
             "action": {"type": "exec", "command": ["pytest", "-q"], "env": {}}}
    listing = {"type": "local_shell_call_output", "call_id": "call_sh", "output": "3 passed"}
    entries = responses(r_user("Look it up, then test."), r_reasoning("rs_1"), _search(),
                        r_reasoning("rs_2"), shell, listing, r_assistant("Done.", id="msg_1"))
    out = sanitize(entries, Policy.PRIVATE_FREE, upstream=False)
    sent = wire(out.entries)
    assert _types(sent) == ["message", "web_search_call", "local_shell_call",
                            "local_shell_call_output", "message"]
    assert not any("id" in item for item in sent[1:3]) and out.items_dropped == 0
    blocks = render_blocks(entries, range(len(entries)), len, lambda e: 10)
    text = "\n".join(b.text for b in blocks)
    assert "web_search_call" in text and "pytest" in text and "3 passed" in text
