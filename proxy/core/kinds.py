"""`Api` and `Kind` members as plain module constants, for the loops over every entry.

An enum member read through its class (`Kind.RESULT`) costs about 0.1 µs in Python 3.11, a
module constant a few nanoseconds; a loop that visits every entry of a long thread on every
request (`safe_cuts`, `tool_groups`, the sanitizer) compares `entry.kind is RESULT` instead.
Elsewhere the enum spelled out reads better and costs nothing that matters.
"""

from __future__ import annotations

from proxy.conversation import CHAT, RESPONSES, Kind

__all__ = ["CHAT", "RESPONSES", "INSTRUCTION", "USER", "ASSISTANT", "CALL", "RESULT", "REASONING",
           "OTHER"]
INSTRUCTION = Kind.INSTRUCTION
USER = Kind.USER
ASSISTANT = Kind.ASSISTANT
CALL = Kind.CALL
RESULT = Kind.RESULT
REASONING = Kind.REASONING
OTHER = Kind.OTHER
