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
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import os
import re
import socket
import stat
import tempfile
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from . import config
from .errors import ArgumentError, CacheDirectoryError, CacheLockTimeout, CacheWarning
from .objcheck import InvalidObject
from .ownership import foreign
from .toolchain import cache_root

__all__ = [
    "cache_key", "get_or_build", "get", "put", "cache_dir", "max_bytes", "lock_timeout", "info", "clear",
    "CacheInfo", "Check",
]

#: A payload check: raises :class:`~pyjlad.objcheck.InvalidObject` for a bad payload.
Check = Callable[[bytes], None]

_MAGIC = b"PYJLAD2\n"
_OLD_MAGICS = (b"PYJLAD1\n",)  # entries of earlier pyjlad versions: removed without a word
_MAC_BYTES = 32  # HMAC-SHA256
_SECRET_NAME = "secret.key"
_SECRET_BYTES = 32
_STALE_TEMP_S = 3600.0  # a temporary file this old is an orphan whoever wrote it
_UNNAMED_TEMP_S = 60.0  # one not named as this version names them (an earlier version's)
_KEY = re.compile(r"^[0-9a-f]{64}$")
_SHARD = re.compile(r"^[0-9a-f]{2}$")
_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_TEMP = re.compile(r"^\.[0-9a-f]{16}\.(?P<host>[0-9a-f]{8})\.(?P<pid>\d+)\..*\.tmp$")

_state_lock = threading.Lock()
_read_only: set[Path] = set()  # directories this process no longer writes to (see _degrade)
_warned: set[tuple[str, str]] = set()
_secrets: dict[Path, tuple[tuple[int, int, int, int], bytes]] = {}  # by (dev, inode, mtime, ctime)


def cache_dir() -> Path:
    """Directory holding compiled-gradient entries (``PYJLAD_GRADIENT_CACHE_DIR`` overrides it)."""
    override = config.gradient_cache_dir_override()
    return Path(override) if override else cache_root() / "gradients"


def cache_key(*parts: str) -> str:
    """SHA-256 over ``parts`` (separated so that concatenations cannot collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


# --- settings -------------------------------------------------------------------------------------------------


def max_bytes() -> int:
    """The cap on the entries' total size: ``PYJLAD_CACHE_MAX_BYTES`` (bytes), default 2 GiB.

    Raises
    ------
    SettingError
        If the value is not a whole number of bytes (checked whenever the cache is opened).
    """
    return config.cache_max_bytes()


def lock_timeout() -> float:
    """Seconds to wait for another process's entry lock: ``PYJLAD_LOCK_TIMEOUT``, default 600.

    Raises
    ------
    SettingError
        If the value is not a non-negative number of seconds (checked whenever the cache is opened).
    """
    return config.lock_timeout_s()


def _disabled() -> bool:
    """``PYJLAD_DISABLE_DISK_CACHE`` is on; else the cache's settings are checked, so that a typo in them is
    reported before any gradient is built, not after.

    Raises
    ------
    SettingError
        If a cache setting cannot be read.
    """
    if config.disk_cache_disabled():
        return True
    max_bytes()
    lock_timeout()
    return False


# --- warnings and degradation ---------------------------------------------------------------------------------


def _warn_once(kind: str, where: object, message: str) -> None:
    """Issue ``message`` as a :class:`CacheWarning` once per (``kind``, ``where``) in this process."""
    with _state_lock:
        if (kind, str(where)) in _warned:
            return
        _warned.add((kind, str(where)))
    warnings.warn(message, CacheWarning, stacklevel=3)


def _degrade(directory: Path, exc: OSError) -> None:
    """Stop writing to ``directory`` in this process; say so once."""
    with _state_lock:
        _read_only.add(directory)
    reason = f"{exc.strerror or exc}" + (f" ({errno.errorcode.get(exc.errno, exc.errno)})" if exc.errno else "")
    where = f": {exc.filename}" if exc.filename else ""
    _warn_once("unwritable", directory,
               f"pyjlad's disk cache {directory} cannot be written ({reason}{where}); compiled gradients are "
               "kept in memory only for the rest of this process. Free space, fix the directory, or set "
               "PYJLAD_GRADIENT_CACHE_DIR to a writable one (PYJLAD_DISABLE_DISK_CACHE=1 silences this)")


def _refuse(directory: Path, why: str) -> None:
    _warn_once("refused", directory,
               f"pyjlad does not use the disk cache {directory}: {why}, and its entries are machine code this "
               f"process would run. Compiled gradients are kept in memory only. Fix: chmod go-w {directory} (or "
               "chown it), or set PYJLAD_GRADIENT_CACHE_DIR to a directory of your own")


def _directory(create: bool) -> Path | None:
    """The cache directory if it may be used (created 0700 when ``create``), else None."""
    if _disabled():
        return None
    directory = cache_dir()
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        if not create or directory in _read_only:
            return None
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(directory)
        except OSError as exc:
            _degrade(directory, exc)
            return None
    except OSError as exc:
        _refuse(directory, f"it cannot be examined ({exc.strerror})")
        return None
    if not stat.S_ISDIR(st.st_mode):
        _refuse(directory, "it is not a directory")
        return None
    why = foreign(st)
    if why is not None:
        _refuse(directory, why)
        return None
    return directory


def _writable(directory: Path) -> bool:
    return directory not in _read_only


# --- the secret -----------------------------------------------------------------------------------------------


def _read_secret(path: Path) -> tuple[tuple[int, int, int, int], bytes] | None:
    """The secret at ``path`` with its identity, or None if it is missing or cannot be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None  # missing, or a symlink (ELOOP): replaced by _secret
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or foreign(st) is not None or st.st_mode & 0o077:
            return None  # someone else may know it: entries signed with it prove nothing
        data = os.read(fd, _SECRET_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) != _SECRET_BYTES:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns), data


def _secret(directory: Path, create: bool) -> bytes | None:
    """The per-user HMAC key of ``directory`` (created, or replaced if untrustworthy, when ``create``)."""
    path = directory / _SECRET_NAME
    try:
        st = os.lstat(path)
        identity = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        cached = _secrets.get(directory)
        if cached is not None and cached[0] == identity:
            return cached[1]
    except OSError:
        pass
    found = _read_secret(path)
    if found is None:
        if not create or not _writable(directory):
            return None
        existed = os.path.lexists(path)
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{'0' * 16}.{_HOST}.{os.getpid()}.", suffix=".tmp")
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(os.urandom(_SECRET_BYTES))
                if existed:
                    os.replace(tmp, path)  # an untrustworthy key: every entry signed with it is rebuilt
                else:
                    try:
                        os.link(tmp, path)  # never overwrites the key another process has just created
                    except FileExistsError:
                        pass
            finally:
                _remove(Path(tmp))
        except OSError as exc:
            _degrade(directory, exc)
            return None
        found = _read_secret(path)
        if found is None:
            return None
    with _state_lock:
        _secrets[directory] = found
    return found[1]


def _mac(secret: bytes, key: str, payload: bytes) -> bytes:
    h = hmac.new(secret, digestmod=hashlib.sha256)
    h.update(key.encode() + b"\0")
    h.update(payload)
    return h.digest()


# --- entries --------------------------------------------------------------------------------------------------


def _entry(directory: Path, key: str) -> Path:
    if not _KEY.match(key):
        raise ArgumentError(f"a cache key is a SHA-256 hex digest (see cache_key), got {key!r}")
    return directory / key[:2] / f"{key}.bin"


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _discard(directory: Path, path: Path, st: os.stat_result, why: str) -> None:
    """Remove the entry ``path`` (if it is still the file ``st``); tell the user once."""
    try:
        if os.path.samestat(os.lstat(path), st):
            path.unlink()
    except OSError:
        pass
    _warn_once("discarded", directory,
               f"pyjlad ignored the disk-cache entry {path} ({why}) and builds it again; further entries ignored "
               f"in {directory} are not reported")


def _load(directory: Path, key: str, check: Check | None) -> bytes | None:
    """The verified payload of entry ``key``, or None (missing, untrusted or bad: then removed)."""
    path = _entry(directory, key)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            try:
                st = os.lstat(path)
            except OSError:
                return None
            _discard(directory, path, st, "a symbolic link")
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            _discard(directory, path, st, "not a regular file")
            return None
        why = foreign(st)
        if why is not None:
            _discard(directory, path, st, why)
            return None
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        blob = b"".join(chunks)
        try:
            os.utime(fd if os.utime in os.supports_fd else path)  # the least recently used go first
        except OSError:
            pass
    except OSError:
        return None
    finally:
        os.close(fd)
    secret = _secret(directory, create=False)
    header = len(_MAGIC) + _MAC_BYTES
    payload = blob[header:]
    if blob.startswith(_OLD_MAGICS):
        _remove(path)
        return None
    if secret is None or len(blob) < header or not blob.startswith(_MAGIC):
        _discard(directory, path, st, "not a pyjlad cache entry of this user")
        return None
    if not hmac.compare_digest(blob[len(_MAGIC):header], _mac(secret, key, payload)):
        _discard(directory, path, st, "its signature does not match: damaged, or not written by this user")
        return None
    if check is not None:
        try:
            check(payload)
        except InvalidObject as exc:
            _discard(directory, path, st, f"invalid contents: {exc}")
            return None
    return payload


def _shard(directory: Path, key: str) -> Path:
    """The entry's directory, created 0700; an untrustworthy one raises PermissionError."""
    shard = directory / key[:2]
    try:
        shard.mkdir(mode=0o700)
    except FileExistsError:
        pass
    st = os.lstat(shard)
    why = "it is not a directory" if not stat.S_ISDIR(st.st_mode) else foreign(st)
    if why is not None:
        raise CacheDirectoryError(errno.EACCES, f"not used: {why}", str(shard))
    return shard


def _store(directory: Path, key: str, payload: bytes) -> None:
    """Write entry ``key`` atomically: a private temporary file, renamed into place, removed on any failure."""
    secret = _secret(directory, create=True)
    if secret is None:
        return
    path = _entry(directory, key)
    blob = _MAGIC + _mac(secret, key, payload) + payload
    if len(blob) > max_bytes():
        return  # could never stay
    fd, tmp = tempfile.mkstemp(dir=_shard(directory, key), prefix=f".{key[:16]}.{_HOST}.{os.getpid()}.",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        _remove(Path(tmp))
        raise


def _acquire(directory: Path, key: str) -> FileLock | None:
    """Entry ``key``'s lock, held; None if the directory cannot be written (degraded)."""
    timeout = lock_timeout()
    try:
        lock = FileLock(str(_shard(directory, key) / f"{key}.lock"), timeout=timeout, mode=0o600)
        lock.acquire()
    except Timeout as exc:
        raise CacheLockTimeout(_timeout_message(Path(exc.lock_file), timeout)) from None
    except OSError as exc:
        _degrade(directory, exc)
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


def _build(build: Callable[[], bytes], check: Check | None, directory: Path | None) -> bytes:
    """``build()``, checked; built once more if the check fails (a bad result is never returned)."""
    payload = build()
    if check is None:
        return payload
    try:
        check(payload)
    except InvalidObject as exc:
        _warn_once("invalid-build", directory, f"pyjlad discarded an invalid freshly built result "
                   f"({exc}) and builds it once more")
        payload = build()
        check(payload)  # raises InvalidObject: the caller says what it was building
    return payload


# --- public API -----------------------------------------------------------------------------------------------


def get(key: str, check: Check | None = None) -> bytes | None:
    """The payload stored under ``key``, or None (missing, untrusted, invalid, or the cache disabled).

    ``check`` validates the payload (:mod:`pyjlad.objcheck`); an entry that fails it is removed.
    """
    directory = _directory(create=False)
    return None if directory is None else _load(directory, key, check)


def put(key: str, payload: bytes, check: Check | None = None) -> None:
    """Store ``payload`` under ``key`` (atomically; a no-op with the cache disabled or unwritable).

    Raises
    ------
    InvalidObject
        If ``check`` rejects ``payload`` (it is not stored).
    CacheLockTimeout
        If another process holds the entry's lock for longer than :func:`lock_timeout`.
    """
    if check is not None:
        check(payload)
    directory = _directory(create=True)
    if directory is None or not _writable(directory):
        return
    lock = _acquire(directory, key)
    if lock is None:
        return
    try:
        _store(directory, key, payload)
    except OSError as exc:
        _degrade(directory, exc)
        return
    finally:
        lock.release()
    _evict(directory)


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
    CacheLockTimeout
        If another process holds the entry's lock for longer than :func:`lock_timeout`.
    """
    directory = _directory(create=True)
    if directory is None:
        return _build(build, check, None)
    payload = _load(directory, key, check)
    if payload is not None:
        return payload
    lock = _acquire(directory, key) if _writable(directory) else None
    if lock is None:
        return _build(build, check, directory)
    try:
        payload = _load(directory, key, check)  # another process may have built it meanwhile
        if payload is not None:
            return payload
        payload = _build(build, check, directory)
        try:
            _store(directory, key, payload)
        except OSError as exc:
            _degrade(directory, exc)
            return payload
    finally:
        lock.release()
    _evict(directory)
    return payload


# --- size cap, orphans, info and clear --------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheInfo:
    """What :func:`info` reports.

    Attributes
    ----------
    path : Path
        The cache directory.
    entries : int
        Number of entries.
    bytes : int
        Their total size.
    cap : int
        The size cap (:func:`max_bytes`).
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
    match = _TEMP.match(name)
    if now - st.st_mtime > (_UNNAMED_TEMP_S if match is None else _STALE_TEMP_S):
        return True
    if match is None:
        return False
    if match["host"] != _HOST:
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
            if _SHARD.match(item.name) and item.is_dir(follow_symlinks=False):
                shards.append(item)
            elif item.name.endswith(".tmp") and _orphan(item.name, item.stat(follow_symlinks=False), now):
                _remove(Path(item.path))  # a secret-key writer's
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
            if item.name.endswith(".bin") and _KEY.match(item.name[:-4]):
                entries.append((st.st_mtime, st.st_size, path))
            elif item.name.endswith(".lock"):
                locks.append(path)
            elif item.name.endswith(".tmp") and _orphan(item.name, st, now):
                _remove(path)
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
        _remove(lock_path)  # while held: a waiter on the removed file retries on a new one
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
            _remove(lock_path)
    finally:
        lock.release()


def _evict(directory: Path) -> None:
    """Remove the least recently used entries until their total is within :func:`max_bytes`."""
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


def info() -> CacheInfo:
    """The cache directory, its number of entries, their total size and the cap."""
    directory = cache_dir()
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
    if _disabled():
        problem = "disabled by PYJLAD_DISABLE_DISK_CACHE=1"
    return CacheInfo(path=directory, entries=len(entries), bytes=sum(size for _, size, _ in entries),
                     cap=max_bytes(), problem=problem)


def clear() -> int:
    """Remove every entry (and idle lock and orphaned temporary file); return how many entries went.

    Entries being built or written by another process right now stay.

    Raises
    ------
    PermissionError
        If the directory is not this user's (its files are left alone).
    """
    directory = cache_dir()
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
