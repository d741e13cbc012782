"""On-disk cache of Enzyme's output and of the machine code compiled from it.

An entry is the bitcode ``opt`` produced for one (portable module, driver,
toolchain) triple, or the machine code Numba compiled from it, stored under
the SHA-256 of its inputs, so a second process that needs the same gradient
skips Enzyme (and LLVM's code generation) entirely.

The cache is a convenience and is treated as untrusted input:

* **It degrades, never blocks.** A cache directory that cannot be written
  (read-only, full, over a file-size limit) turns the disk cache off for
  writing in this process, with one :class:`~pyjlad.errors.CacheWarning`;
  gradients are then built and kept in memory. Temporary files are created
  with ``mkstemp`` in the entry's directory (``O_EXCL``, no symlink followed,
  mode 0600) and removed whatever happens; those of writers that died are
  swept later.
* **It cannot be poisoned.** Each entry carries an HMAC-SHA256 of its key and
  payload, keyed by a per-user secret (``secret.key``, 0600, created on first
  use), so a corrupted, copied, renamed or planted entry is ignored and
  rebuilt. Payloads are checked (``check``, e.g. an ELF or LLVM-module check
  from :mod:`pyjlad.objcheck`) before they are stored and after they are read;
  a bad one is discarded and rebuilt, and the user is told once.
* **It is not a code loader for others.** A cache directory, shard directory
  or entry that is not owned by the current user, or that group or others
  may write, is not used.
* **It is bounded.** ``PYJLAD_CACHE_MAX_BYTES`` (default 2 GiB) caps the
  entries' total size; the least recently used (a hit touches the entry's
  mtime) are evicted with their lock files.
* **Lock waits are bounded.** Building an entry holds its ``filelock``; another
  process waits for it at most ``PYJLAD_LOCK_TIMEOUT`` seconds (default 600),
  then gets a :class:`~pyjlad.errors.CacheLockTimeout` naming the lock file.
  A holder that dies releases its lock at once (``flock``).

``PYJLAD_DISABLE_DISK_CACHE=1`` turns the disk cache off;
``PYJLAD_GRADIENT_CACHE_DIR`` moves it.

This module is the cache's interface; its parts are :mod:`~pyjlad.cache.layout`
(keys and file names), :mod:`~pyjlad.cache.access` (trusting and degrading the
directory), :mod:`~pyjlad.cache.secret` (signatures),
:mod:`~pyjlad.cache.entries` (reading and writing one entry),
:mod:`~pyjlad.cache.locks` (entry locks), :mod:`~pyjlad.cache.maintenance`
(size cap, orphans, info and clear) and :mod:`~pyjlad.cache.settings`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from .. import config
from ..toolchain import cache_root
from . import maintenance
from .access import degrade, usable, writable
from .entries import Check, build_checked, load, store
from .layout import cache_key, checked_key
from .locks import acquire
from .maintenance import CacheInfo, evict
from .settings import disabled, lock_timeout, max_bytes

__all__ = [
    "cache_key", "get_or_build", "get", "put", "cache_dir", "max_bytes", "lock_timeout", "info", "clear",
    "CacheInfo", "Check",
]


def cache_dir() -> Path:
    """Directory holding compiled-gradient entries (``PYJLAD_GRADIENT_CACHE_DIR`` overrides it)."""
    override = config.gradient_cache_dir_override()
    return Path(override) if override else cache_root() / "gradients"


def _directory(create: bool) -> Path | None:
    """The cache directory if it may be used (created 0700 when ``create``), else None."""
    if disabled():
        return None
    return usable(cache_dir(), create)


def get(key: str, check: Check | None = None) -> bytes | None:
    """The payload stored under ``key``, or None (missing, untrusted, invalid, or the cache disabled).

    ``check`` validates the payload (:mod:`pyjlad.objcheck`); an entry that fails it is removed.

    Raises
    ------
    ArgumentError
        If ``key`` is not a SHA-256 hex digest (:func:`cache_key`), whether or not the cache is in use.
    """
    checked_key(key)
    directory = _directory(create=False)
    return None if directory is None else load(directory, key, check)


def put(key: str, payload: bytes, check: Check | None = None) -> None:
    """Store ``payload`` under ``key`` (atomically; a no-op with the cache disabled or unwritable).

    Raises
    ------
    InvalidObject
        If ``check`` rejects ``payload`` (it is not stored).
    ArgumentError
        If ``key`` is not a SHA-256 hex digest (:func:`cache_key`), whether or not the cache is in use.
    CacheLockTimeout
        If another process holds the entry's lock for longer than :func:`lock_timeout`.
    """
    checked_key(key)
    if check is not None:
        check(payload)
    directory = _directory(create=True)
    if directory is None or not writable(directory):
        return
    lock = acquire(directory, key)
    if lock is None:
        return
    try:
        store(directory, key, payload)
    except OSError as exc:
        degrade(directory, exc)
        return
    finally:
        lock.release()
    evict(directory)


def get_or_build(key: str, build: Callable[[], bytes], check: Check | None = None) -> bytes:
    """Return the payload stored under ``key``, building and storing it if needed.

    One process builds an entry while the others wait for it (at most
    :func:`lock_timeout` seconds). ``check`` validates the payload when it is
    read and when it is built; a built payload that fails it is built once
    more. Set ``PYJLAD_DISABLE_DISK_CACHE=1`` to always build.

    Raises
    ------
    InvalidObject
        If ``build()`` twice returns a payload ``check`` rejects.
    ArgumentError
        If ``key`` is not a SHA-256 hex digest (:func:`cache_key`), whether or not the cache is in use.
    CacheLockTimeout
        If another process holds the entry's lock for longer than :func:`lock_timeout`.
    """
    checked_key(key)
    directory = _directory(create=True)
    if directory is None:
        return build_checked(build, check, None)
    payload = load(directory, key, check)
    if payload is not None:
        return payload
    lock = acquire(directory, key) if writable(directory) else None
    if lock is None:
        return build_checked(build, check, directory)
    try:
        payload = load(directory, key, check)  # another process may have built it meanwhile
        if payload is not None:
            return payload
        payload = build_checked(build, check, directory)
        try:
            store(directory, key, payload)
        except OSError as exc:
            degrade(directory, exc)
            return payload
    finally:
        lock.release()
    evict(directory)
    return payload


def info() -> CacheInfo:
    """The cache directory, its number of entries, their total size and the cap."""
    return maintenance.summary(cache_dir())


def clear() -> int:
    """Remove every entry (and idle lock and orphaned temporary file); return how many entries went.

    Entries being built or written by another process right now stay.

    Raises
    ------
    PermissionError
        If the directory is not this user's (its files are left alone).
    """
    return maintenance.clear(cache_dir())
