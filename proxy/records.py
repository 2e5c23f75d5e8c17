"""The facts the proxy keeps per thread, as plain frozen records.

The pure core reads and returns these; the stores (`proxy/store/`) persist them. Nothing here
does I/O. Every record converts to and from plain JSON-able data (`to_data` / `from_data`) so
any store can keep it as one document.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar, NamedTuple, TypeVar

R = TypeVar("R")


def _from_data(cls: type[R], data: dict[str, Any]) -> R:
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    known = {k: v for k, v in data.items() if k in names}
    for f in fields(cls):  # type: ignore[arg-type]
        if f.name in known and isinstance(known[f.name], list) and "tuple" in str(f.type):
            known[f.name] = tuple(known[f.name])
    return cls(**known)


class ThreadKey(NamedTuple):
    """State is keyed by (tenant digest, thread id); never by the credential itself.

    A named tuple, not a dataclass: it keys the hot path's caches, several lookups a request,
    and a tuple hashes and compares in C."""

    tenant: str
    thread: str


@dataclass(frozen=True, init=False)
class Anchor:
    """The usage upstream reported for one response, tied to the projection it answered.

    The response's message(s) sit at `position` in the next request's projection when the
    client echoes them; `prefix_digest` covers the projection up to there (and the request's
    tools/instructions), so the anchor is used only for that exact projection (SPEC §6).
    """

    response_digests: tuple[str, ...]
    position: int
    prefix_digest: str
    input_tokens: int
    output_tokens: int  # visible output: reasoning tokens already subtracted
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    model: str = ""
    created_at: float = 0.0
    # The length a list needs to hold the echo: an estimate tests it for every kept anchor,
    # so each anchor works it out once. Derived: `ClassVar` keeps it out of the fields (the
    # stored form, `==`, `asdict`).
    echo_end: ClassVar[int]

    def __init__(self, response_digests: tuple[str, ...], position: int, prefix_digest: str,
                 input_tokens: int, output_tokens: int, cached_tokens: int = 0,
                 reasoning_tokens: int = 0, model: str = "", created_at: float = 0.0) -> None:
        # One is made for every answer: one update of the instance's dict instead of the
        # frozen `__init__`'s `object.__setattr__` per field. Still frozen afterwards.
        self.__dict__.update(
            response_digests=response_digests, position=position, prefix_digest=prefix_digest,
            input_tokens=input_tokens, output_tokens=output_tokens, cached_tokens=cached_tokens,
            reasoning_tokens=reasoning_tokens, model=model, created_at=created_at,
            echo_end=position + len(response_digests))

    def to_data(self) -> dict[str, Any]:
        # Written for every answer: `asdict`'s deep copy costs more than the insert.
        return {"response_digests": list(self.response_digests), "position": self.position,
                "prefix_digest": self.prefix_digest, "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens, "cached_tokens": self.cached_tokens,
                "reasoning_tokens": self.reasoning_tokens, "model": self.model,
                "created_at": self.created_at}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> Anchor:
        return _from_data(cls, data)


@dataclass(frozen=True)
class CompactionEvent:
    """A checkpoint (SPEC §5): enough to rebuild the projection from the raw list, always."""

    cutoff_index: int  # index in the raw list of the first message kept raw
    cutoff_message_id: str | None  # that message's id (identity digest with occurrence)
    prefix_digest: str  # digest of the raw messages before the cutoff
    summary_message: dict[str, Any]  # the summary as it goes upstream (wire JSON)
    restore_messages: tuple[dict[str, Any], ...] = ()  # restored files, plan, user messages
    history_file: str | None = None
    # The thread's history size with this and every earlier checkpoint's lines in (bytes of
    # a file; lines of a Redis list): a later offload first cuts the history back to it (lines
    # past it are from an attempt killed before its checkpoint). None: unknown (stored before
    # it was recorded).
    history_end: int | None = None
    strategy: str = "partial"  # partial | full | manual
    tokens_before: int = 0
    tokens_after: int = 0
    created_at: float = 0.0
    model: str = ""
    summarizer_model: str = ""
    api: str = "chat"
    offload_error: str | None = None
    # The trigger the compaction aimed under: a request with a lower one (a smaller model) is
    # not held back by the hysteresis. 0: not recorded (an event stored before it was).
    trigger: int = 0
    seq: int = 0

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> CompactionEvent:
        return _from_data(cls, data)


@dataclass(frozen=True)
class MicrocompactMark:
    """How far microcompaction reached: results up to this message stay cleared (sticky)."""

    through_message_id: str | None
    through_index: int
    created_at: float = 0.0

    def to_data(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> MicrocompactMark:
        return _from_data(cls, data)


@dataclass(frozen=True)
class ThreadState:
    key: ThreadKey
    created_at: float | None = None
    last_activity: float | None = None
    anchors: tuple[Anchor, ...] = ()  # latest first
    event: CompactionEvent | None = None  # the latest checkpoint
    event_count: int = 0
    microcompact: MicrocompactMark | None = None
    last_estimate: int | None = None
    # The time of the touch that gave `last_estimate`, where the store keeps it (Redis, whose
    # instances' touches arrive out of order); None: unknown, any newer estimate replaces it.
    estimate_at: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def known(self) -> bool:
        return self.created_at is not None
