"""An exclusive lock on a file, held by one process at a time, that names its holder.

flock(2) rather than a pid file checked by hand: the kernel drops the lock when the holder's
last descriptor closes, its death included, so a crashed holder leaves nothing to clean up
and whoever starts next takes the lock at once. The holder writes its pid into the file, so
that a refused process can say who holds it.

A flock belongs to an open file description: a second take of the same file in the same
process conflicts too, until the first is released.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path


class LockHeld(Exception):
    """Another process (or another take in this one) holds the lock on `path`."""

    def __init__(self, path: Path, holder_pid: int | None) -> None:
        self.path = path
        self.holder_pid = holder_pid
        super().__init__(f"{path} is held by {self.holder}")

    @property
    def holder(self) -> str:
        """Who holds the lock, as a message names it."""
        return f"pid {self.holder_pid}" if self.holder_pid else "another process (pid unknown)"


class ExclusiveLock:
    """A lock taken on `path` (see `take`); held until `release` or the process ends."""

    def __init__(self, path: Path, descriptor: int) -> None:
        self.path = path
        self._descriptor: int | None = descriptor

    @classmethod
    def take(cls, path: Path) -> ExclusiveLock:
        """The lock on `path`, created if missing; LockHeld, at once, while another holds it.
        OSError when the file cannot be created or opened."""
        # Close-on-exec, so that a child started while it is held (`mediamesh up`'s) does
        # not keep it after its parent is gone.
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _pid_in(descriptor)
            os.close(descriptor)
            raise LockHeld(path, holder) from None
        except BaseException:
            os.close(descriptor)
            raise
        # Never unlinked on release: a process that opened the old file just before would
        # lock a name no longer in the folder while a third locks a new one.
        os.ftruncate(descriptor, 0)
        os.pwrite(descriptor, f"{os.getpid()}\n".encode(), 0)
        return cls(path, descriptor)

    def release(self) -> None:
        """Lets go of the lock; a second call does nothing."""
        if self._descriptor is not None:
            os.close(self._descriptor)
            self._descriptor = None


def _pid_in(descriptor: int) -> int | None:
    """The pid the holder wrote, None when unreadable (the holder may not have written it
    yet: it writes just after it takes the lock)."""
    with contextlib.suppress(OSError, ValueError):
        return int(os.pread(descriptor, 32, 0).decode().strip())
    return None
