"""`Api` and `Kind` members as plain module constants, for the loops over every entry.

An enum member read through its class (`Kind.RESULT`) costs about 0.1 µs in Python 3.11, a
module constant a few nanoseconds; a loop that visits every entry of a long thread on every
request (`safe_cuts`, `tool_groups`, the sanitizer) compares `entry.kind is RESULT` instead.
Elsewhere the enum spelled out reads better and costs nothing that matters.
"""

from __future__ import annotations

from proxy.conversation import (ASSISTANT, CALL, CHAT, INSTRUCTION, OTHER, REASONING, RESPONSES,
                                RESULT, USER)

__all__ = ["CHAT", "RESPONSES", "INSTRUCTION", "USER", "ASSISTANT", "CALL", "RESULT", "REASONING",
           "OTHER"]
