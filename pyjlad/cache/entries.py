"""Reading and writing one cache entry: ``MAGIC``, its signature, then its payload.

An entry is read without following symbolic links, and used only if it is a
regular file of this user, signed with this user's secret and accepted by the
payload check; anything else is removed and the user told once. It is written
to a private temporary file that is renamed into place (or removed).
"""

from __future__ import annotations

import errno
import hmac
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..objcheck import InvalidObject
from ..ownership import foreign
from .access import warn_once
from .layout import entry_path, remove, shard, temp_prefix
from .secret import MAC_BYTES, mac, secret
from .settings import max_bytes

__all__ = ["Check", "load", "store", "build_checked", "MAGIC", "MAC_BYTES"]

#: A payload check: raises :class:`~pyjlad.objcheck.InvalidObject` for a bad payload.
Check = Callable[[bytes], None]

MAGIC = b"PYJLAD2\n"
_OLD_MAGICS = (b"PYJLAD1\n",)  # entries of earlier pyjlad versions: removed without a word


def _discard(directory: Path, path: Path, st: os.stat_result, why: str) -> None:
    """Remove the entry ``path`` (if it is still the file ``st``); tell the user once."""
    try:
        if os.path.samestat(os.lstat(path), st):
            path.unlink()
    except OSError:
        pass
    warn_once("discarded", directory,
              f"pyjlad ignored the disk-cache entry {path} ({why}) and builds it again; further entries ignored "
              f"in {directory} are not reported")


def load(directory: Path, key: str, check: Check | None) -> bytes | None:
    """The verified payload of entry ``key``, or None (missing, untrusted or bad: then removed)."""
    path = entry_path(directory, key)
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
    secret_key = secret(directory, create=False)
    header = len(MAGIC) + MAC_BYTES
    payload = blob[header:]
    if blob.startswith(_OLD_MAGICS):
        remove(path)
        return None
    if secret_key is None or len(blob) < header or not blob.startswith(MAGIC):
        _discard(directory, path, st, "not a pyjlad cache entry of this user")
        return None
    if not hmac.compare_digest(blob[len(MAGIC):header], mac(secret_key, key, payload)):
        _discard(directory, path, st, "its signature does not match: damaged, or not written by this user")
        return None
    if check is not None:
        try:
            check(payload)
        except InvalidObject as exc:
            _discard(directory, path, st, f"invalid contents: {exc}")
            return None
    return payload


def store(directory: Path, key: str, payload: bytes) -> None:
    """Write entry ``key`` atomically: a private temporary file, renamed into place, removed on any failure."""
    secret_key = secret(directory, create=True)
    if secret_key is None:
        return
    path = entry_path(directory, key)
    blob = MAGIC + mac(secret_key, key, payload) + payload
    if len(blob) > max_bytes():
        return  # could never stay
    fd, tmp = tempfile.mkstemp(dir=shard(directory, key), prefix=temp_prefix(key[:16]), suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except BaseException:
        remove(Path(tmp))
        raise


def build_checked(build: Callable[[], bytes], check: Check | None, directory: Path | None) -> bytes:
    """``build()``, checked; built once more if the check fails (a bad result is never returned)."""
    payload = build()
    if check is None:
        return payload
    try:
        check(payload)
    except InvalidObject as exc:
        warn_once("invalid-build", directory, f"pyjlad discarded an invalid freshly built result "
                  f"({exc}) and builds it once more")
        payload = build()
        check(payload)  # raises InvalidObject: the caller says what it was building
    return payload
