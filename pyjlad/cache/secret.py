"""The per-user secret that signs cache entries, and the signature (HMAC-SHA256) itself.

The secret (``secret.key``, 32 bytes, mode 0600) is created on first use. One
that someone else may know (another owner, group or others may read it, a
symbolic link) is replaced, so every entry signed with it is rebuilt.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import stat
import tempfile
import threading
from pathlib import Path

from ..ownership import foreign
from .access import degrade, writable
from .layout import remove, temp_prefix

__all__ = ["secret", "mac", "MAC_BYTES"]

MAC_BYTES = 32  # HMAC-SHA256
_SECRET_NAME = "secret.key"
_SECRET_BYTES = 32

_lock = threading.Lock()
_secrets: dict[Path, tuple[tuple[int, int, int, int], bytes]] = {}  # by (dev, inode, mtime, ctime)


def _read_secret(path: Path) -> tuple[tuple[int, int, int, int], bytes] | None:
    """The secret at ``path`` with its identity, or None if it is missing or cannot be trusted."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None  # missing, or a symlink (ELOOP): replaced by secret()
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


def secret(directory: Path, create: bool) -> bytes | None:
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
        if not create or not writable(directory):
            return None
        existed = os.path.lexists(path)
        try:
            fd, tmp = tempfile.mkstemp(dir=directory, prefix=temp_prefix("0" * 16), suffix=".tmp")
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
                remove(Path(tmp))
        except OSError as exc:
            degrade(directory, exc)
            return None
        found = _read_secret(path)
        if found is None:
            return None
    with _lock:
        _secrets[directory] = found
    return found[1]


def mac(secret_key: bytes, key: str, payload: bytes) -> bytes:
    """The signature of entry ``key`` holding ``payload``, under the secret ``secret_key``.

    Examples
    --------
    >>> len(mac(b"s" * 32, "0" * 64, b"payload")) == MAC_BYTES
    True
    >>> mac(b"s" * 32, "0" * 64, b"payload") == mac(b"t" * 32, "0" * 64, b"payload")
    False
    """
    h = hmac.new(secret_key, digestmod=hashlib.sha256)
    h.update(key.encode() + b"\0")
    h.update(payload)
    return h.digest()
