"""Per-function memoization that does not keep user functions alive."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

__all__ = ["cached_for"]

_by_function: weakref.WeakKeyDictionary[Any, dict[tuple, Any]] = weakref.WeakKeyDictionary()
_by_id: dict[int, tuple[Any, dict[tuple, Any]]] = {}
_lock = threading.RLock()


def cached_for(func: Any, key: tuple, factory: Callable[[], Any]) -> Any:
    """``factory()`` once per (``func``, ``key``), remembered while ``func`` lives.

    Functions that cannot be weakly referenced are kept alive with their entry.
    ``factory`` runs under a lock (re-entrant: a factory may call ``cached_for``).
    """
    with _lock:
        try:
            table = _by_function.setdefault(func, {})
        except TypeError:
            table = _by_id.setdefault(id(func), (func, {}))[1]
        if key not in table:
            table[key] = factory()
        return table[key]
