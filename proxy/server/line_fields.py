"""What a request's line says of its answer and its projection (`proxy/server/pipeline.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.projection import Built
from proxy.server.prepared import Attempt


def error_named(what: str, error: Any) -> str:
    """`what`, with the error's code and type only: a message may quote the prompt."""
    named = (", ".join(str(error[k]) for k in ("code", "type") if error.get(k))
             if isinstance(error, Mapping) else "")
    return f"{what}: {named}" if named else what


def stage_fields(built: Built) -> Mapping[str, Any]:
    """What the stages changed; asked only when one did (`cascade.changed`)."""
    stages = {r.name: {"changed": r.changed, "tokens_saved": r.tokens_saved}
              for r in built.cascade.reports if r.changed}
    return {"stages": stages, "tokens_saved": built.cascade.tokens_saved} if stages else {}


def lesson_fields(attempt: Attempt, built: Built) -> Mapping[str, Any]:
    """The lesson a request went up with, when it changed the request: restoring the loop's
    blocks changes only a projection rebuilt from a checkpoint."""
    if attempt.fix and (not attempt.keep_loop or built.event is not None):
        return {"retry_lesson": attempt.fix.reason}
    return {}
