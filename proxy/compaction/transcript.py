"""The summarized part of a conversation, rendered as plain text for the summarizer (SPEC §5).

The summarizer sees text only, never the wire form: one block per entry, tool calls and results
labelled with the tool's name and call id. The span is first cleaned by the shared stages:
`sanitize(..., PRIVATE_FREE)` removes every kind of provider-private reasoning state (SPEC
§7.1), and `repair` gives a call without a result an explicit cancelled result (never an
invented success) and drops orphan and duplicate results. The renderer itself reads only
visible text, call arguments and result text, so private fields could not leak through it
either.

Blocks are packed into chunks that each fit the summarizer's budget; one block larger than the
budget is cut in the middle with a marker saying how much was left out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from proxy.conversation import Api, Entry, Kind, content_text, reference_id
from proxy.core.repair import repair
from proxy.core.sanitize import Policy, sanitize

Count = Callable[[str], int]
Measure = Callable[[Entry], int]

# A single file dump or log adds cost but little to a summary; the files come back via restore.
BLOCK_CAP_TOKENS = 6000
_LABEL_TOKENS = 12

_NON_TEXT = {"image_url": "an image", "input_image": "an image", "input_audio": "an audio clip",
             "file": "a file", "input_file": "a file"}


@dataclass(frozen=True)
class Block:
    text: str
    tokens: int


def render_blocks(entries: Sequence[Entry], span: range, count: Count, measure: Measure,
                  cap_tokens: int = BLOCK_CAP_TOKENS) -> list[Block]:
    """One block per rendered entry of `span`, each at most `cap_tokens`.

    A block is sized by `measure` (the estimator's cached per-entry count) so a large prefix
    is not tokenized a second time; only a block over the cap is counted as text.
    """
    clean = repair(sanitize(entries[span.start:span.stop], Policy.PRIVATE_FREE,
                            upstream=False).entries).entries
    names: dict[str, str] = {}  # the latest call's tool per id: an id may come back later
    blocks = []
    for entry in clean:
        names.update((c.id, c.name) for c in entry.calls)
        text = _render(entry, names)
        if text:
            blocks.append(_capped(text, measure(entry) + _LABEL_TOKENS, count, cap_tokens))
    return blocks


def chunk(blocks: Sequence[Block], budget: int, max_chars: int | None = None) -> list[str]:
    """Blocks packed in order into texts of at most `budget` tokens and `max_chars` characters
    each (at least one text). A block longer than `max_chars` is cut in the middle to fit."""
    chunks: list[list[str]] = [[]]
    used = chars = 0
    for block in blocks:
        text = block.text
        if max_chars is not None and len(text) > max_chars:
            text = middle_cut(text, max_chars / len(text))
        if chunks[-1] and (used + block.tokens > budget
                           or (max_chars is not None and chars + len(text) > max_chars)):
            chunks.append([])
            used = chars = 0
        chunks[-1].append(text)
        used += block.tokens
        chars += len(text) + 2  # and the blank line joining it to the next
    return ["\n\n".join(c) for c in chunks]


def _render(entry: Entry, names: dict[str, str]) -> str:
    kind = entry.kind
    if kind is Kind.USER:
        return f"[user]\n{_visible(entry)}"
    if kind is Kind.INSTRUCTION:
        return f"[{entry.role or 'system'} message]\n{_visible(entry)}"
    if kind in (Kind.ASSISTANT, Kind.CALL):
        return _render_assistant(entry)
    if kind is Kind.RESULT:
        name = names.get(entry.answers or "", "unknown")
        return f"[result of tool {name} (call {entry.answers})]\n{_visible(entry)}"
    if kind is Kind.REASONING:
        return ""
    if entry.api is Api.CHAT and entry.role == "function":  # the deprecated result form
        return f"[result of tool {entry.raw.get('name')}]\n{_visible(entry)}"
    return _render_other(entry)


def _render_assistant(entry: Entry) -> str:
    lines = []
    legacy = entry.raw.get("function_call") if entry.api is Api.CHAT else None
    if not isinstance(legacy, dict):
        legacy = None
    if entry.kind is Kind.ASSISTANT and (content_text(entry) or not (entry.calls or legacy)):
        lines.append(f"[assistant]\n{_visible(entry)}")
    for call in entry.calls:
        what = "input" if call.custom else "arguments"
        lines.append(f"[assistant called tool {call.name} (call {call.id}) with {what}]\n"
                     f"{call.arguments}")
    if legacy is not None:  # the deprecated single call, answered by a `function` message
        lines.append(f"[assistant called tool {legacy.get('name')} with arguments]\n"
                     f"{legacy.get('arguments')}")
    return "\n".join(lines)


def _render_other(entry: Entry) -> str:
    referenced = reference_id(entry)
    if referenced is not None:
        # Its content is upstream's (stored): the summary must not read it as nothing said.
        return (f"[an earlier item ({referenced}) the client sent by reference: its content "
                "is stored upstream and not shown here]")
    type_ = entry.raw.get("type") or entry.role or "item"
    text = content_text(entry)
    return f"[{type_}]\n{text}" if text else f"[{type_} item, no text]"


def _visible(entry: Entry) -> str:
    """The entry's text, with a short note for each image, audio clip or file it carried."""
    text = content_text(entry)
    notes = [f"[{_NON_TEXT[t]} was attached here]" for t in _part_types(entry) if t in _NON_TEXT]
    return "\n".join(x for x in (text, *notes) if x) or "(empty)"


def _part_types(entry: Entry) -> list[str]:
    key = "output" if entry.kind is Kind.RESULT and entry.api is Api.RESPONSES else "content"
    content = entry.raw.get(key)
    if not isinstance(content, list):
        return []
    return [p["type"] for p in content if isinstance(p, dict) and isinstance(p.get("type"), str)]


def _capped(text: str, tokens: int, count: Count, cap: int) -> Block:
    if tokens <= cap:
        return Block(text, tokens)
    tokens = count(text)
    if tokens <= cap:
        return Block(text, tokens)
    cut = middle_cut(text, cap / tokens)
    return Block(cut, count(cut))


def middle_cut(text: str, keep_share: float) -> str:
    """Head and tail of `text` keeping about `keep_share` of it, with a marker for the gap."""
    keep = max(0, int(len(text) * keep_share * 0.95) - 80)
    head, tail = keep * 2 // 3, keep // 3
    omitted = len(text) - head - tail
    if omitted <= 0:
        return text
    marker = f"\n[... {omitted} characters omitted here ...]\n"
    return text[:head] + marker + (text[len(text) - tail:] if tail else "")
