"""Factories and hypothesis strategies shared by the compaction tests (no tests of its own)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import strategies as st

from proxy.conversation import Api, Entries, Entry, entries_from
from proxy.identity import Identities

# ---------------------------------------------------------------- chat messages


def system(text: str = "You are a coding agent.") -> dict[str, Any]:
    return {"role": "system", "content": text}


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def assistant(text: str) -> dict[str, Any]:
    return {"role": "assistant", "content": text}


def assistant_calls(*calls: tuple[str, str, dict[str, Any]], text: str | None = None,
                    **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": text, **extra,
            "tool_calls": [{"id": cid, "type": "function",
                            "function": {"name": name, "arguments": orjson.dumps(args).decode()}}
                           for cid, name, args in calls]}


def tool_result(call_id: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


# ---------------------------------------------------------------- Responses items


def r_user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def r_assistant(text: str, item_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"type": "message", "role": "assistant",
                            "content": [{"type": "output_text", "text": text, "annotations": []}]}
    if item_id:
        item["id"] = item_id
    return item


def r_reasoning(item_id: str) -> dict[str, Any]:
    return {"type": "reasoning", "id": item_id, "summary": [],
            "encrypted_content": "gAAAA" + item_id}


def r_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call_id, "name": name,
            "arguments": orjson.dumps(args).decode()}


def r_output(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": output}


# ---------------------------------------------------------------- conversations


def conv(api: Api, elements: Sequence[dict[str, Any]]) -> Entries:
    """Entries with the client's bytes, as `parse_inbound` makes them."""
    return entries_from(api, list(elements), [orjson.dumps(e) for e in elements])


def ids_of(entries: Sequence[Entry]) -> list[str]:
    return Identities().ids(entries)


def count(text: str) -> int:
    return len(text) // 4 + 1


def measure(entry: Entry) -> int:
    return len(entry.to_bytes()) // 4 + 4


def estimate(entries: Sequence[Entry]) -> int:
    return sum(measure(e) for e in entries) + 3


# ---------------------------------------------------------------- a generated agent session


@dataclass(frozen=True)
class Step:
    calls: int  # parallel calls of one assistant turn
    answered: tuple[bool, ...]  # which calls got a result
    shuffled: bool  # results in another order than the calls
    reasoning: bool  # Responses: a reasoning item before the calls
    size: int


@dataclass(frozen=True)
class Turn:
    text: str
    steps: tuple[Step, ...]
    final: bool  # an assistant text answer closes the turn
    final_reasoning: bool


def _step() -> st.SearchStrategy[Step]:
    return st.integers(1, 3).flatmap(lambda n: st.builds(
        Step, st.just(n), st.lists(st.booleans(), min_size=n, max_size=n).map(tuple)
        | st.just((True,) * n), st.booleans(), st.booleans(), st.integers(0, 400)))


turns = st.lists(st.builds(Turn, st.text(min_size=1, max_size=60), st.lists(_step(), max_size=3)
                           .map(tuple), st.booleans(), st.booleans()), min_size=1, max_size=8)


def session(api: Api, leading: int, plan: Sequence[Turn]) -> list[dict[str, Any]]:
    """A coding-agent session of either API from one abstract plan."""
    out: list[dict[str, Any]] = [system(f"rule {i}") for i in range(leading)]
    serial = 0
    for t, turn in enumerate(plan):
        out.append(user(f"{t}: {turn.text}") if api is Api.CHAT else r_user(f"{t}: {turn.text}"))
        for step in turn.steps:
            ids = [f"call_{serial + k}" for k in range(step.calls)]
            serial += step.calls
            calls = [(cid, "read_file", {"path": f"/src/{cid}.py"}) for cid in ids]
            results = [(cid, "x" * step.size) for cid, ok in zip(ids, step.answered) if ok]
            if step.shuffled:
                results.reverse()
            if api is Api.CHAT:
                out.append(assistant_calls(*calls))
                out.extend(tool_result(cid, text) for cid, text in results)
            else:
                if step.reasoning:
                    out.append(r_reasoning(f"rs_{serial}"))
                out.extend(r_call(cid, name, args) for cid, name, args in calls)
                out.extend(r_output(cid, text) for cid, text in results)
        if turn.final:
            if api is Api.CHAT:
                out.append(assistant(f"finished {t}"))
            else:
                if turn.final_reasoning:
                    out.append(r_reasoning(f"rs_final_{t}"))
                out.append(r_assistant(f"finished {t}"))
    return out


sessions = st.tuples(st.sampled_from([Api.CHAT, Api.RESPONSES]), st.integers(0, 2), turns)
