"""One owner per state directory: the exclusive advisory lock a serving store holds.

The SQLite store caches thread states in memory (`proxy/store/cached.py`), so two proxies on
one `state.path` would each summarize the same prefix and append the same history twice. The
serving store takes `flock(LOCK_EX)` on `state.lock` for its whole life. The lock belongs to
the open file, so the OS releases it when the process dies, however it dies: a SIGKILL never
leaves a stale lock. The file keeps the owner's pid, for the message a second proxy gets.
The read-only CLI (`threads`, `inspect`, `check-state`) does not take it to read; it takes it
shared for the few system calls that remove the -wal and -shm SQLite made for its reading
(`reader.read_only_view`), so a proxy starting just then waits that moment out: `acquire`
tries again for up to `_WAIT_S` before it says the directory is in use.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from proxy.store.base import StoreError

LOCK_FILE = "state.lock"
_WAIT_S = 1.0


class StateLock:
    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, root: Path) -> StateLock:
        """Lock `root/state.lock` (creating it 0600), or raise StoreError naming the holder.
        `root` must exist."""
        path = root / LOCK_FILE
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            _lock_waiting(fd)
        except BlockingIOError:
            holder = _read_pid(fd)
            os.close(fd)
            by = f"another proxy process (pid {holder})" if holder else "another proxy process"
            raise StoreError(f"state.path {root} is in use: {by} holds {path}; "
                             "one proxy process owns a state directory") from None
        except BaseException:
            os.close(fd)
            raise
        _write_pid(fd)
        return cls(path, fd)

    def release(self) -> None:
        """Idempotent. The file stays: removing it could let a third process lock a new file
        while a second one still waits on the old one."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # closing the last descriptor of the open file releases the lock


def _lock_waiting(fd: int) -> None:
    """`flock(LOCK_EX)`, tried again for `_WAIT_S` (a CLI's moment holds it shared); then
    BlockingIOError: another proxy owns the directory."""
    deadline = time.monotonic() + _WAIT_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def _read_pid(fd: int) -> int | None:
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _write_pid(fd: int) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
