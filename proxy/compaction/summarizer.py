"""The summarizer exchange as a plan the server drives step by step (SPEC §5).

`plan_summary` decides everything the summarizer is sent: the direction of the prompt, the
transcript split into chunks that fit the summarizer's own window, the clock, the focus. A
prefix that fits is one step; a larger one is summarized rolling (chunk 1 → summary; that
summary + chunk 2 → summary; ...). For each step the server posts `plan.request(step, carried)`
and reads the answer with `summary_reply.read_reply`.

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

from proxy.compaction import prompts, transcript
from proxy.compaction.cutoff import FULL, Cutoff
from proxy.compaction.prompts import Direction
from proxy.compaction.transcript import Count, Measure
from proxy.conversation import Api, Entry
from proxy.settings import SummarizerSettings

# Room left in the summarizer's window for what the counts miss (framing, tokenizer drift).
_WINDOW_SHARE = 0.9
_MIN_CHUNK_TOKENS = 512
# OpenAI refuses a message whose content is a longer string (400 `string_above_max_length`,
# PROTOCOL.md), whatever the window: with a window of some 300k tokens and more, a step of
# code-heavy transcript passed it. A step's user message, the summary it carries included,
# stays under it.
MAX_CONTENT_CHARS = 1_048_576
# A carried summary is the summarizer's prose, some 4 characters a token: twice that is kept.
_SUMMARY_CHARS_PER_TOKEN = 8
_MIN_CHUNK_CHARS = 4096
_PART_DIGITS = 16  # "part 1 of 2" in the measured frame; more steps write longer numbers


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
    max_chars = _chunk_chars(settings.max_output_tokens, clock, focus, cutoff.previous_summary)
    blocks = transcript.render_blocks(entries, cutoff.new_entries, count, measure,
                                      min(transcript.BLOCK_CAP_TOKENS, budget))
    direction = (Direction.LATEST if cutoff.strategy == FULL or cutoff.index >= len(entries)
                 else Direction.EARLIER)
    return SummaryPlan(api, model, direction, tuple(transcript.chunk(blocks, budget, max_chars)),
                       cutoff.previous_summary, clock, focus, settings.max_output_tokens,
                       _output_key(api, client_doc, model), cutoff)


def _chunk_budget(window: int, max_output: int, clock: str, focus: str | None,
                  previous: str | None, count: Count) -> int:
    """Transcript tokens per step: the input window less the prompt and the carried summary
    (any step's carried summary may be as long as an answer can be). The answer itself needs
    no room here: `window` is input only."""
    frame = count(prompts.system_prompt(Direction.LATEST, rolling=True))
    frame += count(prompts.user_message("", clock, focus, None, (0, 2)))
    carried = max(max_output, count(previous) if previous else 0)
    return max(_MIN_CHUNK_TOKENS, int(window * _WINDOW_SHARE) - carried - frame)


def _chunk_chars(max_output: int, clock: str, focus: str | None, previous: str | None) -> int:
    """Transcript characters per step: the step's user message, with its frame and the summary
    it carries (the previous one, or an answer of up to `max_output` tokens), stays within
    MAX_CONTENT_CHARS."""
    frame = len(prompts.user_message("", clock, focus, "-", (0, 2))) + _PART_DIGITS
    carried = max(max_output * _SUMMARY_CHARS_PER_TOKEN, len(previous) if previous else 0)
    return max(_MIN_CHUNK_CHARS, MAX_CONTENT_CHARS - frame - carried)


def _output_key(api: Api, client_doc: Mapping[str, Any] | None, model: str = "") -> str:
    """The chat key of the summary's output cap. OpenAI's reasoning models refuse `max_tokens`
    (400 `unsupported_parameter`), as a client that used the newer key knows of its model; many
    other OpenAI-compatible servers know only `max_tokens`. A name not told apart here (an Azure
    deployment) gets the newer key on the retry the refusal buys (`summarizer_client`)."""
    if api is Api.RESPONSES:
        return "max_output_tokens"
    if client_doc is not None and "max_completion_tokens" in client_doc:
        return "max_completion_tokens"
    return COMPLETION_KEY if _REASONING_MODEL.match(model) else "max_tokens"


COMPLETION_KEY = "max_completion_tokens"
# o1, o3, o4-mini, gpt-5 and their dated or provider-prefixed names (`openai/o3-mini`).
_REASONING_MODEL = re.compile(r"(?:[\w.-]+/)?(?:o[1-9](?![0-9])|gpt-5)", re.IGNORECASE)
