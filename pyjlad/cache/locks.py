"""The lock an entry is built under, and the message when waiting for it takes too long.

Building an entry holds its ``filelock`` (``flock``: a holder that dies releases
it at once); another process waits at most :func:`~pyjlad.cache.lock_timeout`
seconds, then gets a :class:`~pyjlad.errors.CacheLockTimeout` naming the lock
file and, where ``/proc/locks`` shows it, the process holding it.
"""

from __future__ import annotations

import os
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import CacheLockTimeout
from .access import degrade
from .layout import shard
from .settings import lock_timeout

__all__ = ["acquire"]


def acquire(directory: Path, key: str) -> FileLock | None:
    """Entry ``key``'s lock, held; None if the directory cannot be written (degraded).

    Raises
    ------
    CacheLockTimeout
        If another process holds the lock for longer than :func:`~pyjlad.cache.lock_timeout`.
    """
    timeout = lock_timeout()
    try:
        lock = FileLock(str(shard(directory, key) / f"{key}.lock"), timeout=timeout, mode=0o600)
        lock.acquire()
    except Timeout as exc:
        raise CacheLockTimeout(_timeout_message(Path(exc.lock_file), timeout)) from None
    except OSError as exc:
        degrade(directory, exc)
        return None
    return lock


def _holder(lock_file: Path) -> str:
    """`` (held by process N)`` from /proc/locks where the holder can be seen, else ''."""
    try:
        st = os.stat(lock_file)
        wanted = f":{st.st_ino}"
        with open("/proc/locks") as fh:
            for line in fh:
                fields = line.split()
                if len(fields) > 5 and fields[1] == "FLOCK" and fields[5].endswith(wanted):
                    dev = fields[5].rsplit(":", 1)[0]
                    major, minor = (int(p, 16) for p in dev.split(":"))
                    if (major, minor) == (os.major(st.st_dev), os.minor(st.st_dev)):
                        return f" (held by process {fields[4]})"
    except (OSError, ValueError):
        pass
    return ""


def _timeout_message(lock_file: Path, timeout: float) -> str:
    return (
        f"waited {timeout:g} s for the disk-cache lock {lock_file}{_holder(lock_file)}: another process is "
        "building the same gradient, or hangs while holding it (a process that exits releases it). Wait for "
        "it, end it, raise PYJLAD_LOCK_TIMEOUT (seconds), or set PYJLAD_DISABLE_DISK_CACHE=1"
    )
