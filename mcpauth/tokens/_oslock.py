"""The operating-system primitives under :class:`~mcpauth.tokens.FileTokenStore`.

A non-blocking whole-file lock (``fcntl.flock``; ``msvcrt.locking`` on Windows, best effort),
its release, and the directory fsync that makes an ``os.replace`` durable. Kept apart from
the store so the platform split is one ``if`` in one place and the store reads the same on
every platform.
"""

from __future__ import annotations

import errno
import os
import sys

__all__ = ["fsync_dir", "try_lock_file", "unlock_file"]

if sys.platform == "win32":
    import msvcrt

    def try_lock_file(fd: int) -> bool:
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def unlock_file(fd: int) -> None:
        try:
            os.lseek(fd, 0, os.SEEK_SET)
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        except OSError:
            pass
        finally:
            os.close(fd)

    def fsync_dir(directory: str) -> None:
        """Windows cannot open a directory for fsync; os.replace is as durable as it gets."""

else:
    import fcntl

    def try_lock_file(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return False
            raise
        return True

    def unlock_file(fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def fsync_dir(directory: str) -> None:
        """Make the rename itself durable: without this a crash can lose the new name."""
        try:
            dfd = os.open(directory, os.O_RDONLY)
        except OSError:
            return
        try:
            os.fsync(dfd)
        except OSError:
            pass
        finally:
            os.close(dfd)

