"""Per-function memoization that does not keep user functions alive.

Each entry is built under its own lock, so a slow factory (a Numba compile, an
Enzyme run) blocks only the callers that need that same entry; the table lock
is held just long enough to look up or insert. The locks are renewed in a
forked child, which never inherits a lock another thread of the parent held.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["cached_for"]

_by_function: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_by_id: dict[int, tuple[Any, dict[tuple, Any]]] = {}
_lock = threading.Lock()


class _Building:
    """Placeholder of an entry being built: the lock its builder holds."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = threading.RLock()


def _table(func: Any) -> dict[tuple, Any]:
    try:
        return _by_function.setdefault(func, {})
    except TypeError:
        return _by_id.setdefault(id(func), (func, {}))[1]


def cached_for(func: Any, key: tuple, factory: Callable[[], Any]) -> Any:
    """``factory()`` once per (``func``, ``key``), remembered while ``func`` lives.

    Functions that cannot be weakly referenced are kept alive with their entry.
    Concurrent callers of the same entry wait for its one build; a factory may
    call ``cached_for`` (also for the same entry: it then builds it itself).
    """
    with _lock:
        table = _table(func)
        entry = table.get(key)
        if entry is None:
            entry = table[key] = _Building()
    if not isinstance(entry, _Building):
        return entry
    with entry.lock:
        with _lock:
            current = table.get(key)
        if not isinstance(current, _Building):
            return current  # built by another thread while this one waited
        try:
            value = factory()
        except BaseException:
            with _lock:
                if table.get(key) is entry:
                    del table[key]  # a later call tries again
            raise
        with _lock:
            table[key] = value
        return value


def _renew_locks_in_child() -> None:
    """After ``fork()``: locks another parent thread held would never be released in the child."""
    global _lock
    _lock = threading.Lock()
    for table in [*_by_function.values(), *(t for _, t in _by_id.values())]:
        for key, entry in list(table.items()):
            if isinstance(entry, _Building):
                del table[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)
