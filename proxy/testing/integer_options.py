"""Integer request options the fake checks as OpenAI does: their type, then their range.

Texts, params and codes [OBS]: quoted from OpenAI's answers by clients, for `n` above its
maximum (128), `max_tokens` below its minimum (1), and Responses' `max_output_tokens` below
its minimum (16, through Azure); `invalid_type` as OpenAI words it for `max_tokens` sent as a
string. The other keys are held to the same form.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from proxy.testing import rejections
from proxy.testing.chat_wording import type_name
from proxy.testing.rejections import Rejection

MAX_SAMPLES = 128  # OpenAI's most choices a chat request may ask for

# key -> (least, most): what chat completions accept
CHAT = {"n": (1, MAX_SAMPLES), "max_tokens": (1, None), "max_completion_tokens": (1, None)}
RESPONSES = {"max_output_tokens": (16, None)}


def refused_integer(body: Mapping[str, Any], bounds: Mapping[str, tuple[int, int | None]]
                    ) -> Rejection | None:
    """OpenAI's refusal of the first option in `bounds` that `body` sets (not null) to
    something other than an integer in its range; None when all are fine."""
    for key, (least, most) in bounds.items():
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            return rejections.openai(f"Invalid type for '{key}': expected an integer, but got "
                                     f"{type_name(value)} instead.", param=key,
                                     code="invalid_type")
        if value < least:
            return rejections.openai(f"Invalid '{key}': integer below minimum value. Expected a "
                                     f"value >= {least}, but got {value} instead.", param=key,
                                     code="integer_below_min_value")
        if most is not None and value > most:
            return rejections.openai(f"Invalid '{key}': integer above maximum value. Expected a "
                                     f"value <= {most}, but got {value} instead.", param=key,
                                     code="integer_above_max_value")
    return None



def asked(body: Mapping[str, Any], key: str, bounds: Mapping[str, tuple[int, int | None]],
          default: int) -> int:
    """The option `key` as the request sets it, or `default` when it is unset or would be
    refused (a dialect that does not check it answers as if it were unset)."""
    value = body.get(key)
    least, most = bounds[key]
    if type(value) is not int or value < least or (most is not None and value > most):
        return default
    return value
