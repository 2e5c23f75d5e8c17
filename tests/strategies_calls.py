"""Responses inputs that mix every call kind the client runs, and chat lists that mix the legacy
`function_call` form with `tool_calls`, with call ids used again in later steps.

`call_steps()` draws `(elements, continuation)`: a Responses `input` of turns whose steps make
one to three parallel calls of any client-run kind (`function_call`, `custom_tool_call`,
`local_shell_call`, `shell_call`, `apply_patch_call`, `computer_call`), each answered by an
output of its own kind (in every shape that kind's output takes), or left unanswered, answered
twice, or answered later than its step; reasoning items before steps, some naming the items they
produced by server id; orphan outputs and dangling reasoning items put in anywhere; two calls
of one step given one id. Call ids are numbered across the list, afresh per turn, or afresh per
step (servers that number calls per response), so `call_0` comes back in later steps.
`continuation` is what the same client sends next: a user message and whole steps, numbered
the same way, which repair must leave the repaired list in front of as it was.

`chat_steps()` draws the same for chat: the base strategy's conversations with ids renumbered
the same ways before the damage, and legacy calls mixed into the steps.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from tests.damage import damaged, is_answer
from tests.strategies import SIGNER, conversations

Wire = dict[str, Any]

CLIENT_KINDS = ("function_call", "custom_tool_call", "local_shell_call", "shell_call",
                "apply_patch_call", "computer_call")
NUMBERINGS = ("across", "per_turn", "per_step")
_SCREENSHOT = {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}


def _text(role: str, text: str) -> Wire:
    part = ({"type": "output_text", "text": text, "annotations": []} if role == "assistant"
            else {"type": "input_text", "text": text})
    return {"type": "message", "role": role, "content": [part]}


def call_item(kind: str, call_id: str, tag: str, n: int) -> Wire:
    """A call of `kind`; `tag` makes its server id (where the kind has one) unique."""
    if kind == "function_call":
        return {"type": kind, "call_id": call_id, "name": "read_file",
                "arguments": json.dumps({"path": f"src/m{n}.py"})}
    if kind == "custom_tool_call":
        return {"type": kind, "call_id": call_id, "name": "apply_patch", "input": f"*** Begin Patch {n}"}
    if kind == "local_shell_call":
        return {"type": kind, "id": f"lsh_{tag}", "call_id": call_id, "status": "completed",
                "action": {"type": "exec", "command": ["cat", f"m{n}.py"], "env": {}}}
    if kind == "shell_call":
        return {"type": kind, "call_id": call_id, "status": "completed",
                "action": {"commands": [f"cat m{n}.py"]}}
    if kind == "apply_patch_call":
        return {"type": kind, "call_id": call_id, "status": "completed",
                "operation": {"type": "delete_file", "path": f"old{n}.py"}}
    return {"type": kind, "id": f"cu_{tag}", "call_id": call_id, "status": "completed",
            "action": {"type": "click", "x": n, "y": 2}, "pending_safety_checks": []}


@st.composite
def output_item(draw: st.DrawFn, kind: str, call_id: str) -> Wire:
    """An output the client sent for a call of `kind`, in one of the shapes that kind's takes."""
    type_ = f"{kind}_output"
    if kind == "shell_call":
        code = draw(st.sampled_from((0, 0, 1, 2)))
        return {"type": type_, "call_id": call_id, "max_output_length": 4096,
                "output": [{"stdout": "line\n" * code, "stderr": "",
                            "outcome": {"type": "exit", "exit_code": code}}]}
    if kind == "apply_patch_call":
        return {"type": type_, "call_id": call_id, "status": draw(st.sampled_from(("completed", "failed"))),
                "output": draw(st.sampled_from(("Done.", "Patch failed: no such file")))}
    if kind == "computer_call":
        return {"type": type_, "call_id": call_id, "output": _SCREENSHOT}
    if kind == "local_shell_call":  # the SDK types name the call in `id`, the server in `call_id`
        return {"type": type_, draw(st.sampled_from(("call_id", "id"))): call_id, "output": "a\nb"}
    output: Any = draw(st.sampled_from(("ok", "", [{"type": "input_text", "text": "parts"}])))
    return {"type": type_, "call_id": call_id, "output": output}


class _Ids:
    """Call ids by the drawn numbering: `call_<n>` counted across the list, or afresh after each
    user message, or afresh for each step."""

    def __init__(self, numbering: str) -> None:
        self.numbering, self.n = numbering, 0

    def turn(self) -> None:
        if self.numbering == "per_turn":
            self.n = 0

    def step(self) -> None:
        if self.numbering == "per_step":
            self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"call_{self.n - 1}"


@st.composite
def _step(draw: st.DrawFn, ids: _Ids, nonce: str, fates: tuple[str, ...]) -> tuple[list[Wire], list[Wire]]:
    """One response's items and their outputs: (the items, then the outputs right after
    them; outputs to be put later in the list). `fates`: what may become of an output."""
    ids.step()
    reasoned = draw(st.integers(0, 2)) > 0
    server_ids = reasoned and draw(st.booleans())
    items: list[Wire] = []
    if reasoned:
        items.append({"type": "reasoning", "id": SIGNER.reasoning_id(nonce), "summary": []})
    produced: list[Wire] = []
    if draw(st.integers(0, 3)) == 0:
        produced.append(_text("assistant", "Let me look."))
    kinds = draw(st.lists(st.sampled_from(CLIENT_KINDS), min_size=0 if produced else 1, max_size=3))
    calls = [call_item(kind, ids.next(), f"{nonce}{k}", k) for k, kind in enumerate(kinds)]
    if len(calls) > 1 and draw(st.integers(0, 5)) == 0:  # two calls of the step given one id
        calls[1] = {**calls[1], "call_id": calls[0]["call_id"]}
    produced += calls
    if server_ids:
        for k, item in enumerate(produced):
            prefix = {"message": "msg", "function_call": "fc", "custom_tool_call": "ctc"}.get(item["type"])
            if prefix is not None:
                item["id"] = SIGNER.item_id(prefix, nonce, k, reasoned=True)
    outputs: list[Wire] = []
    later: list[Wire] = []
    for call in {c["call_id"]: c for c in calls}.values():
        output = draw(output_item(call["type"], call["call_id"]))
        fate = draw(st.sampled_from(fates))
        if fate in ("answered", "twice"):
            outputs.append(output)
        if fate in ("twice", "late"):
            later.append(output)
    return items + produced + outputs, later


_MESSY = ("answered", "answered", "answered", "missing", "twice", "late")


@st.composite
def _turns(draw: st.DrawFn, ids: _Ids, nonces: Any, max_turns: int,
           fates: tuple[str, ...]) -> tuple[list[Wire], list[tuple[int, Wire]]]:
    """The turns' items, and the outputs to put in later, each with the first place it may go."""
    out: list[Wire] = []
    later: list[tuple[int, Wire]] = []
    for t in range(draw(st.integers(1, max_turns))):
        ids.turn()
        out.append(_text("user", f"Turn {t}."))
        for _ in range(draw(st.integers(0, 4))):
            items, moved = draw(_step(ids, f"{next(nonces):024x}", fates))
            out += items
            later += [(len(out), o) for o in moved]
    return out, later


@st.composite
def _put_in(draw: st.DrawFn, out: list[Wire], extras: list[tuple[int, Wire]]) -> list[Wire]:
    """`out` with each extra element put in at a drawn place at or after its floor."""
    placed = sorted(((draw(st.integers(floor, len(out))), k, item) for k, (floor, item) in enumerate(extras)),
                    key=lambda p: (p[0], p[1]))
    result: list[Wire] = []
    at = 0
    for position, _, item in placed:
        result += out[at:position]
        result.append(item)
        at = position
    return result + out[at:]


@st.composite
def call_steps(draw: st.DrawFn, max_turns: int = 4) -> tuple[list[Wire], list[Wire]]:
    ids = _Ids(draw(st.sampled_from(NUMBERINGS)))
    nonces = iter(range(10_000))
    out, later = draw(_turns(ids, nonces, max_turns, _MESSY))
    if draw(st.booleans()):
        out.insert(0, _text("developer", "Be careful."))
        later = [(floor + 1, item) for floor, item in later]
    strays: list[tuple[int, Wire]] = []
    for k in range(draw(st.integers(0, 2))):  # outputs of calls no item makes
        kind = draw(st.sampled_from(CLIENT_KINDS))
        strays.append((0, draw(output_item(kind, f"call_orphan{k}"))))
    for k in range(draw(st.integers(0, 1))):
        strays.append((0, {"type": "reasoning", "id": f"rs_dangling{k}", "summary": []}))
    elements = draw(_put_in(out, later + strays))
    # What the client sends next: whole steps, every call answered in its step.
    more, _ = draw(_turns(ids, nonces, 2, ("answered",)))
    return elements, more


# ---------------------------------------------------------------- chat

def _renumbered(elements: list[Wire], numbering: str) -> list[Wire]:
    """A valid chat list with its tool call ids numbered the drawn way (the answers follow
    their call message, so each is renamed by its message's map)."""
    out: list[Wire] = []
    n, names = 0, {}
    for element in elements:
        role = element.get("role")
        if role == "user" and numbering == "per_turn":
            n = 0
        if element.get("tool_calls"):
            if numbering == "per_step":
                n = 0
            names = {}
            calls = []
            for c in element["tool_calls"]:
                names[c["id"]] = f"call_{n}"
                n += 1
                calls.append({**c, "id": names[c["id"]]})
            element = {**element, "tool_calls": calls}
        elif role == "tool":
            element = {**element, "tool_call_id": names[element["tool_call_id"]]}
        out.append(element)
    return out


@st.composite
def chat_steps(draw: st.DrawFn, max_turns: int = 4) -> tuple[list[Wire], list[Wire]]:
    """(a damaged chat list, what the client sends next), ids numbered the drawn way."""
    numbering = draw(st.sampled_from(NUMBERINGS))
    whole = draw(conversations("chat", max_turns=max_turns + 2))
    users = [i for i, e in enumerate(whole) if e.get("role") == "user"]
    cut = users[draw(st.integers(0, len(users) - 1))] if len(users) > 1 else len(whole)
    numbered = _renumbered(whole, numbering)
    elements, more = numbered[:cut], numbered[cut:]
    if cut == len(whole) or not elements:
        elements, more = numbered, []
    return draw(damaged(elements, "chat")), [e for e in more if e.get("role") != "system"]


__all__ = ["CLIENT_KINDS", "NUMBERINGS", "call_item", "call_steps", "chat_steps", "is_answer",
           "output_item"]
