"""The summarizer exchange as a plan the server drives step by step (SPEC §5).

`plan_summary` decides everything the summarizer is sent: the direction of the prompt, the
transcript split into chunks that fit the summarizer's own window, the clock, the focus. A
prefix that fits is one step; a larger one is summarized rolling (chunk 1 → summary; that
summary + chunk 2 → summary; ...). For each step the server posts `plan.request(step, carried)`
and reads the answer with `read_reply`.

The request is a plain completion: one system message with the instructions and one user
message with the material, no tools, no `stream`, and none of the session's cache or identity
keys (`prompt_cache_key`, `user`, `metadata`, `safety_identifier`), so it never touches the
session's prompt cache. Responses upstreams get the same as `instructions` + one input message,
with `store: false`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from proxy.compaction import prompts, transcript
from proxy.compaction.cutoff import FULL, Cutoff
from proxy.compaction.prompts import Direction
from proxy.compaction.transcript import Count, Measure
from proxy.conversation import Api, Entry
from proxy.settings import SummarizerSettings

# Room left in the summarizer's window for what the counts miss (framing, tokenizer drift).
_WINDOW_SHARE = 0.9
_MIN_CHUNK_TOKENS = 512
_THINK = re.compile(r"^\s*<think>.*?</think>\s*", re.DOTALL)


@dataclass(frozen=True)
class SummaryPlan:
    api: Api  # what the summarizer's upstream speaks
    model: str
    direction: Direction
    chunks: tuple[str, ...]
    previous_summary: str | None  # the carried summary for step 0 (re-compaction)
    clock: str
    focus: str | None
    max_output_tokens: int
    output_key: str
    cutoff: Cutoff

    @property
    def steps(self) -> int:
        return len(self.chunks)

    def request(self, step: int, carried: str | None) -> dict[str, Any]:
        """The body of step `step`; `carried` is the summary so far (the previous one at 0)."""
        last = step == self.steps - 1
        direction = self.direction if last else Direction.EARLIER
        system = prompts.system_prompt(direction, rolling=bool(carried))
        user = prompts.user_message(self.chunks[step], self.clock, self.focus, carried,
                                    (step, self.steps))
        if self.api is Api.RESPONSES:
            return {"model": self.model, "instructions": system,
                    "input": [{"type": "message", "role": "user",
                               "content": [{"type": "input_text", "text": user}]}],
                    self.output_key: self.max_output_tokens, "store": False}
        return {"model": self.model,
                "messages": [{"role": "system", "content": system},
                             {"role": "user", "content": user}],
                self.output_key: self.max_output_tokens}


def plan_summary(entries: Sequence[Entry], cutoff: Cutoff, *, api: Api, model: str,
                 now: datetime, settings: SummarizerSettings, window: int, count: Count,
                 measure: Measure, zone_name: str | None = None, focus: str | None = None,
                 client_doc: Mapping[str, Any] | None = None) -> SummaryPlan:
    """What to send the summarizer for `cutoff`.

    `window` is the summarizer's usable input (its profile's, with the output reservation
    already taken off a total context window; else the fallback trigger); `count` tokenizes
    text, `measure` is the estimator's per-entry count.
    """
    clock = prompts.clock_line(now, zone_name)
    budget = _chunk_budget(window, settings.max_output_tokens, clock, focus,
                           cutoff.previous_summary, count)
    blocks = transcript.render_blocks(entries, cutoff.new_entries, count, measure,
                                      min(transcript.BLOCK_CAP_TOKENS, budget))
    direction = (Direction.LATEST if cutoff.strategy == FULL or cutoff.index >= len(entries)
                 else Direction.EARLIER)
    return SummaryPlan(api, model, direction, tuple(transcript.chunk(blocks, budget)),
                       cutoff.previous_summary, clock, focus, settings.max_output_tokens,
                       _output_key(api, client_doc), cutoff)


def _chunk_budget(window: int, max_output: int, clock: str, focus: str | None,
                  previous: str | None, count: Count) -> int:
    """Transcript tokens per step: the input window less the prompt and the carried summary
    (any step's carried summary may be as long as an answer can be). The answer itself needs
    no room here: `window` is input only."""
    frame = count(prompts.system_prompt(Direction.LATEST, rolling=True))
    frame += count(prompts.user_message("", clock, focus, None, (0, 2)))
    carried = max(max_output, count(previous) if previous else 0)
    return max(_MIN_CHUNK_TOKENS, int(window * _WINDOW_SHARE) - carried - frame)


def _output_key(api: Api, client_doc: Mapping[str, Any] | None) -> str:
    if api is Api.RESPONSES:
        return "max_output_tokens"
    # Reasoning models reject `max_tokens`; a client that used the newer key knows its model.
    if client_doc is not None and "max_completion_tokens" in client_doc:
        return "max_completion_tokens"
    return "max_tokens"


@dataclass(frozen=True)
class SummaryReply:
    text: str
    finish_reason: str | None  # "stop", "length", ... ; "error" when the body was unusable
    output_tokens: int | None = None


def read_reply(api: Api, body: bytes | Mapping[str, Any]) -> SummaryReply:
    """The summary text and why it ended, from the summarizer's JSON answer."""
    doc = _parse(body)
    if doc is None or "error" in doc and doc.get("error"):
        return SummaryReply("", "error")
    reply = _read_responses(doc) if api is Api.RESPONSES else _read_chat(doc)
    return SummaryReply(_THINK.sub("", reply.text).strip(), reply.finish_reason,
                        reply.output_tokens)


def _parse(body: bytes | Mapping[str, Any]) -> Mapping[str, Any] | None:
    if isinstance(body, Mapping):
        return body
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _read_chat(doc: Mapping[str, Any]) -> SummaryReply:
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return SummaryReply("", "error")
    message = choices[0].get("message") or {}
    text = _text(message.get("content")) if isinstance(message, dict) else ""
    finish = choices[0].get("finish_reason")
    return SummaryReply(text, finish if isinstance(finish, str) else None,
                        _usage_count(doc, "completion_tokens"))


def _read_responses(doc: Mapping[str, Any]) -> SummaryReply:
    output = doc.get("output")
    texts = [_text(item.get("content")) for item in (output if isinstance(output, list) else [])
             if isinstance(item, dict) and item.get("type") == "message"]
    return SummaryReply("\n".join(t for t in texts if t), _responses_finish(doc),
                        _usage_count(doc, "output_tokens"))


def _usage_count(doc: Mapping[str, Any], key: str) -> int | None:
    """A count the summarizer's upstream reported; None for anything but a whole number (the
    caller adds them up, and an upstream's odd answer must not break the compaction)."""
    usage = doc.get("usage")
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _responses_finish(doc: Mapping[str, Any]) -> str:
    status = doc.get("status", "completed")
    if status == "completed":
        return "stop"
    details = doc.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status == "incomplete" and reason == "max_output_tokens":
        return "length"
    return str(reason or status)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    return "".join(p["text"] for p in content
                   if isinstance(p, dict) and p.get("type") in ("text", "output_text")
                   and isinstance(p.get("text"), str))
