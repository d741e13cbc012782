"""Keeping the cache directory bounded and tidy, and reporting on it.

After each write the least recently used entries (a hit touches an entry's
mtime) are evicted, with their lock files, until the entries' total size is
within :func:`~pyjlad.cache.max_bytes`. Temporary files of writers that died
are swept on the way. :func:`summary` and :func:`clear` serve ``python -m
pyjlad cache info`` and ``cache clear``.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ..errors import CacheDirectoryError
from ..ownership import foreign
from .layout import HOST, KEY, SHARD, TEMP, remove
from .settings import disabled, max_bytes

__all__ = ["CacheInfo", "evict", "summary", "clear"]

_STALE_TEMP_S = 3600.0  # a temporary file this old is an orphan whoever wrote it
_UNNAMED_TEMP_S = 60.0  # one not named as this version names them (an earlier version's)


@dataclass(frozen=True)
class CacheInfo:
    """What :func:`~pyjlad.cache.info` reports.

    Attributes
    ----------
    path : Path
        The cache directory.
    entries : int
        Number of entries.
    bytes : int
        Their total size.
    cap : int
        The size cap (:func:`~pyjlad.cache.max_bytes`).
    problem : str or None
        Why the directory is not used, if it is not.
    """

    path: Path
    entries: int
    bytes: int
    cap: int
    problem: str | None = None


def _orphan(name: str, st: os.stat_result, now: float) -> bool:
    """Whether the temporary file ``name`` was left by a writer that died (or is far too old)."""
    match = TEMP.match(name)
    if now - st.st_mtime > (_UNNAMED_TEMP_S if match is None else _STALE_TEMP_S):
        return True
    if match is None:
        return False
    if match["host"] != HOST:
        return False
    pid = int(match["pid"])
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False


def _scan(directory: Path) -> tuple[list[tuple[float, int, Path]], list[Path]]:
    """(mtime, size, path) of every entry, and every lock file; orphaned temporary files are removed."""
    entries: list[tuple[float, int, Path]] = []
    locks: list[Path] = []
    now = time.time()
    try:
        top = list(os.scandir(directory))
    except OSError:
        return entries, locks
    shards = []
    for item in top:
        try:
            if SHARD.match(item.name) and item.is_dir(follow_symlinks=False):
                shards.append(item)
            elif item.name.endswith(".tmp") and _orphan(item.name, item.stat(follow_symlinks=False), now):
                remove(Path(item.path))  # a secret-key writer's
        except OSError:
            continue
    for shard in shards:
        try:
            files = list(os.scandir(shard.path))
        except OSError:
            continue
        for item in files:
            try:
                st = item.stat(follow_symlinks=False)
            except OSError:
                continue
            path = Path(item.path)
            if item.name.endswith(".bin") and KEY.match(item.name[:-4]):
                entries.append((st.st_mtime, st.st_size, path))
            elif item.name.endswith(".lock"):
                locks.append(path)
            elif item.name.endswith(".tmp") and _orphan(item.name, st, now):
                remove(path)
    return entries, locks


def _remove_entry(path: Path, mtime: float | None) -> bool:
    """Remove entry ``path`` and its lock file, under that lock (skipped if busy or touched since ``mtime``)."""
    lock_path = path.with_suffix(".lock")
    lock = FileLock(str(lock_path), timeout=0, mode=0o600)
    try:
        lock.acquire()
    except (Timeout, OSError):
        return False  # being built or written: it stays
    try:
        try:
            st = os.lstat(path)
            if mtime is not None and st.st_mtime != mtime:
                return False  # used since the scan
            path.unlink()
        except FileNotFoundError:
            pass
        remove(lock_path)  # while held: a waiter on the removed file retries on a new one
        return True
    except OSError:
        return False
    finally:
        lock.release()


def _remove_idle_lock(lock_path: Path) -> None:
    if lock_path.with_suffix(".bin").exists():
        return
    lock = FileLock(str(lock_path), timeout=0, mode=0o600)
    try:
        lock.acquire()
    except (Timeout, OSError):
        return
    try:
        if not lock_path.with_suffix(".bin").exists():
            remove(lock_path)
    finally:
        lock.release()


def evict(directory: Path) -> None:
    """Remove the least recently used entries until their total is within :func:`~pyjlad.cache.max_bytes`."""
    cap = max_bytes()
    entries, locks = _scan(directory)
    total = sum(size for _, size, _ in entries)
    for mtime, size, path in sorted(entries, key=lambda e: e[0]):
        if total <= cap:
            break
        if _remove_entry(path, mtime):
            total -= size
    for lock_path in locks:
        _remove_idle_lock(lock_path)  # of evicted entries, and of builds that failed


def summary(directory: Path) -> CacheInfo:
    """``directory``, its number of entries, their total size and the cap."""
    problem = None
    entries: list[tuple[float, int, Path]] = []
    try:
        st = os.stat(directory)
        problem = "it is not a directory" if not stat.S_ISDIR(st.st_mode) else foreign(st)
        if problem is None:
            entries, _ = _scan(directory)
    except FileNotFoundError:
        pass
    except OSError as exc:
        problem = f"it cannot be examined ({exc.strerror})"
    if disabled():
        problem = "disabled by PYJLAD_DISABLE_DISK_CACHE=1"
    return CacheInfo(path=directory, entries=len(entries), bytes=sum(size for _, size, _ in entries),
                     cap=max_bytes(), problem=problem)


def clear(directory: Path) -> int:
    """Remove every entry of ``directory`` (and idle lock and orphaned temporary file); return how many went.

    Raises
    ------
    PermissionError
        If the directory is not this user's (its files are left alone).
    """
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        return 0
    why = "it is not a directory" if not stat.S_ISDIR(st.st_mode) else foreign(st)
    if why is not None:
        raise CacheDirectoryError(errno.EACCES, f"not clearing {directory}: {why}", str(directory))
    entries, locks = _scan(directory)
    removed = sum(_remove_entry(path, None) for _, _, path in entries)
    for lock_path in locks:
        _remove_idle_lock(lock_path)
    return removed
