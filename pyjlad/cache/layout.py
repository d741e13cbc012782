"""Keys and file names in the cache directory.

An entry ``KEY`` lives at ``DIR/KE/KEY.bin`` (a two-hex-digit shard), its lock
beside it at ``KEY.lock``; a writer's temporary file is named
``.STEM.HOST.PID.*.tmp`` so that a later process can tell whether its writer
died (see :mod:`pyjlad.cache.maintenance`).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import socket
import stat
from pathlib import Path

from ..errors import ArgumentError, CacheDirectoryError
from ..ownership import foreign

__all__ = ["cache_key", "entry_path", "shard", "temp_prefix", "remove", "KEY", "SHARD", "TEMP", "HOST"]

KEY = re.compile(r"^[0-9a-f]{64}$")
SHARD = re.compile(r"^[0-9a-f]{2}$")
HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
TEMP = re.compile(r"^\.[0-9a-f]{16}\.(?P<host>[0-9a-f]{8})\.(?P<pid>\d+)\..*\.tmp$")


def cache_key(*parts: str) -> str:
    """SHA-256 over ``parts`` (separated so that concatenations cannot collide).

    Examples
    --------
    >>> len(cache_key("module", "driver"))
    64
    >>> cache_key("ab", "c") == cache_key("a", "bc")
    False
    """
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def entry_path(directory: Path, key: str) -> Path:
    """Where entry ``key`` lives in ``directory``.

    Raises
    ------
    ArgumentError
        If ``key`` is not a SHA-256 hex digest (:func:`cache_key`).
    """
    return directory / checked_key(key)[:2] / f"{key}.bin"


def checked_key(key: str) -> str:
    """``key`` itself, checked to be a SHA-256 hex digest (:func:`cache_key`).

    Raises
    ------
    ArgumentError
        If it is not one.
    """
    if not isinstance(key, str) or not KEY.match(key):
        raise ArgumentError(f"a cache key is a SHA-256 hex digest (see cache_key), got {key!r}")
    return key


def shard(directory: Path, key: str) -> Path:
    """The entry's directory, created 0700; an untrustworthy one raises PermissionError."""
    path = directory / key[:2]
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    why = "it is not a directory" if not stat.S_ISDIR(st.st_mode) else foreign(st)
    if why is not None:
        raise CacheDirectoryError(errno.EACCES, f"not used: {why}", str(path))
    return path


def temp_prefix(stem: str) -> str:
    """The prefix of this process's temporary files for ``stem`` (16 hex digits), matched by :data:`TEMP`."""
    return f".{stem}.{HOST}.{os.getpid()}."


def remove(path: Path) -> None:
    """Remove ``path`` if it can be; never raise."""
    try:
        path.unlink()
    except OSError:
        pass
