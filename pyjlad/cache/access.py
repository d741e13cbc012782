"""Whether this process may use a cache directory, and what it tells the user when it may not.

A directory that cannot be written turns the disk cache off for writing in this
process (:func:`degrade`); one that someone else could have changed is not used
at all (:func:`refuse`). Either is said once per directory, as a
:class:`~pyjlad.errors.CacheWarning`.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from pathlib import Path

from ..errors import CacheWarning
from ..ownership import foreign
from ..user_frames import warn_at_caller

__all__ = ["warn_once", "degrade", "refuse", "usable", "writable"]

_state_lock = threading.Lock()
_read_only: set[Path] = set()  # directories this process no longer writes to (see degrade)
_warned: set[tuple[str, str]] = set()


def warn_once(kind: str, where: object, message: str) -> None:
    """Issue ``message`` as a :class:`CacheWarning` once per (``kind``, ``where``) in this process."""
    with _state_lock:
        if (kind, str(where)) in _warned:
            return
        _warned.add((kind, str(where)))
    warn_at_caller(message, CacheWarning)


def degrade(directory: Path, exc: OSError) -> None:
    """Stop writing to ``directory`` in this process; say so once."""
    with _state_lock:
        _read_only.add(directory)
    reason = f"{exc.strerror or exc}" + (f" ({errno.errorcode.get(exc.errno, exc.errno)})" if exc.errno else "")
    where = f": {exc.filename}" if exc.filename else ""
    warn_once("unwritable", directory,
              f"pyjlad's disk cache {directory} cannot be written ({reason}{where}); compiled gradients are "
              "kept in memory only for the rest of this process. Free space, fix the directory, or set "
              "PYJLAD_GRADIENT_CACHE_DIR to a writable one (PYJLAD_DISABLE_DISK_CACHE=1 silences this)")


def refuse(directory: Path, why: str) -> None:
    """Say once that ``directory`` is not used, and why."""
    warn_once("refused", directory,
              f"pyjlad does not use the disk cache {directory}: {why}, and its entries are machine code this "
              f"process would run. Compiled gradients are kept in memory only. Fix: chmod go-w {directory} (or "
              "chown it), or set PYJLAD_GRADIENT_CACHE_DIR to a directory of your own")


def usable(directory: Path, create: bool) -> Path | None:
    """``directory`` if it may be used (created 0700 when ``create``), else None."""
    try:
        st = os.stat(directory)
    except FileNotFoundError:
        if not create or directory in _read_only:
            return None
        try:
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            st = os.stat(directory)
        except OSError as exc:
            degrade(directory, exc)
            return None
    except OSError as exc:
        refuse(directory, f"it cannot be examined ({exc.strerror})")
        return None
    if not stat.S_ISDIR(st.st_mode):
        refuse(directory, "it is not a directory")
        return None
    why = foreign(st)
    if why is not None:
        refuse(directory, why)
        return None
    return directory


def writable(directory: Path) -> bool:
    """Whether this process still writes to ``directory`` (it stops at the first failed write)."""
    return directory not in _read_only
