"""On-disk cache of Enzyme's output, safe under concurrent processes.

An entry is the bitcode ``opt`` produced for one (portable module, driver,
toolchain) triple, stored under the SHA-256 of all three, so a second process
that needs the same gradient skips Enzyme entirely. Entries are written to a
temporary file and renamed into place under a per-key ``filelock``, carry a
checksum header, and a corrupted or truncated entry is detected, deleted and
rebuilt, never loaded.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from .toolchain import cache_root

__all__ = ["cache_key", "get_or_build", "get", "put", "cache_dir"]

_MAGIC = b"PYJLAD1\n"


def cache_dir() -> Path:
    """Directory holding compiled-gradient entries (``PYJLAD_GRADIENT_CACHE_DIR`` overrides it)."""
    override = os.environ.get("PYJLAD_GRADIENT_CACHE_DIR")
    return Path(override) if override else cache_root() / "gradients"


def cache_key(*parts: str) -> str:
    """SHA-256 over ``parts`` (separated so that concatenations cannot collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode()
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    header_len = len(_MAGIC) + 64
    if len(blob) < header_len or not blob.startswith(_MAGIC):
        return None
    digest = blob[len(_MAGIC):header_len].decode(errors="replace")
    payload = blob[header_len:]
    if hashlib.sha256(payload).hexdigest() != digest:
        return None
    return payload


def _disabled() -> bool:
    return os.environ.get("PYJLAD_DISABLE_DISK_CACHE") == "1"


def _path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.bin"


def _write(path: Path, payload: bytes) -> None:
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    tmp.write_bytes(_MAGIC + hashlib.sha256(payload).hexdigest().encode() + payload)
    os.replace(tmp, path)


def get(key: str) -> bytes | None:
    """The cached payload for ``key``, or None (missing, corrupted, or the cache disabled)."""
    return None if _disabled() else _read(_path(key))


def put(key: str, payload: bytes) -> None:
    """Store ``payload`` under ``key`` (atomically; a no-op with the cache disabled)."""
    if _disabled():
        return
    path = _path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_suffix(".lock"))):
        _write(path, payload)


def get_or_build(key: str, build: Callable[[], bytes]) -> bytes:
    """Return the cached payload for ``key``, building and storing it if needed.

    Set ``PYJLAD_DISABLE_DISK_CACHE=1`` to always build.
    """
    if _disabled():
        return build()
    path = _path(key)
    payload = _read(path)
    if payload is not None:
        return payload
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path.with_suffix(".lock"))):
        payload = _read(path)  # another process may have built it meanwhile
        if payload is not None:
            return payload
        if path.exists():
            path.unlink()  # corrupted: never load it
        payload = build()
        _write(path, payload)
    return payload
