"""What the operator can change when the model refuses a compacted request as too long.

An overflow the forced compaction could not cure is usually the configuration's, not the
thread's: a model without a profile is planned for with the fallbacks (the last few messages
kept verbatim, a trigger far above a small model's window), and a profile may claim a larger
window than the model has. The refusal or the `compaction_failed` line says which key to set.
"""

from __future__ import annotations

from typing import Any

from proxy.server.request_line import clipped
from proxy.settings import Settings


def window_hint(settings: Settings, model: str, tokens: Any, limit: int | None = None) -> str | None:
    """The key to set for `model`, refused at about `tokens` (its estimate): its missing
    profile, or its profile's window when `tokens` is below it (`limit`: that window as the
    thresholds give it, else the profile's own). None when neither explains the refusal."""
    profile = settings.profile(model)
    if profile is None:
        config = settings.compaction
        return (f"model {clipped(model)!r} has no profile in `models`, so the proxy keeps its "
                f"last {config.fallback_keep_messages} messages verbatim and compacts past "
                f"{config.fallback_trigger_tokens:,} tokens: set max_input_tokens in a `models` "
                f"entry that matches it to its real input window")
    window = limit if limit is not None else profile.max_input_tokens or profile.context_window
    if not window or not isinstance(tokens, int) or tokens >= window:
        return None
    key = "max_input_tokens" if profile.max_input_tokens else "context_window"
    return (f"at about {tokens:,} tokens, below the {window:,} tokens "
            f"models.{profile.pattern}.{key} allows: the model's real input window is "
            f"smaller; set the profile to it")
