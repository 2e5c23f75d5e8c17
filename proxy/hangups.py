"""SIGHUP from the first moment of the `compaction-proxy` process: noted, not its default action.

The command's modules take most of a second to load (aiohttp, PyYAML, the proxy's own), and
until `serve` installs its own handler a SIGHUP would end the process, where a SIGHUP during the
start is to reload once the proxy listens. The entry module calls `note_early` before anything
slow; `serve` takes over what was noted (`taken`), every other command gives SIGHUP its action
back (`release`), and a hangup noted meanwhile then acts as it would have.
"""

from __future__ import annotations

import signal
import threading

SIGHUP: signal.Signals | None = getattr(signal, "SIGHUP", None)
_noted = False


def note_early() -> None:
    """Note SIGHUPs from now on: in the main thread only (the one place a handler can be set),
    and only over the default action (one started ignoring it, as under nohup, keeps that)."""
    if SIGHUP is None or threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(SIGHUP) is signal.SIG_DFL:
        signal.signal(SIGHUP, _note)


def _note(*_: object) -> None:
    global _noted
    _noted = True


def taken() -> bool:
    """Whether a SIGHUP came since `note_early`."""
    return _noted


def release() -> None:
    """SIGHUP's default action back, for a command that does not reload its config; one that
    came meanwhile acts now."""
    if SIGHUP is None or signal.getsignal(SIGHUP) is not _note:
        return
    signal.signal(SIGHUP, signal.SIG_DFL)
    if _noted:
        signal.raise_signal(SIGHUP)
