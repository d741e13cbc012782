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
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["cached_for", "forget"]

_ATTRIBUTE = "__pyjlad_memo__"
_by_id: dict[int, tuple[Any, dict[tuple, Any]]] = {}
_tables: weakref.WeakValueDictionary[int, _Table] = weakref.WeakValueDictionary()  # for fork
_lock = threading.Lock()


class _Table(dict):
    """One function's entries, kept in the function's own ``__dict__``.

    Its entries refer back to the function (a compiled sweep calls it), so a table
    held outside the function (a ``WeakKeyDictionary``) would keep every
    differentiated function alive for ever; inside it, function and table are an
    ordinary cycle that the garbage collector frees together. Pickled empty: a
    function sent to another process (cloudpickle sends ``__dict__``) rebuilds there.
    """

    __slots__ = ("__weakref__",)

    def __reduce__(self):
        return (_Table, ())


class _Building:
    """Placeholder of an entry being built: the lock its builder holds."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        self.lock = threading.RLock()


def _table(func: Any) -> dict[tuple, Any]:
    try:
        namespace = vars(func)
    except TypeError:  # no __dict__ (a builtin, a slotted object): kept alive with its entry
        return _by_id.setdefault(id(func), (func, {}))[1]
    table = namespace.get(_ATTRIBUTE)
    if not isinstance(table, _Table):
        table = namespace[_ATTRIBUTE] = _Table()
        _tables[id(table)] = table
    return table


def cached_for(func: Any, key: tuple, factory: Callable[[], Any], *,
               build_under: AbstractContextManager | None = None) -> Any:
    """``factory()`` once per (``func``, ``key``), remembered while ``func`` lives.

    Objects without a ``__dict__`` are kept alive with their entry.
    Concurrent callers of the same entry wait for its one build; a factory may
    call ``cached_for`` (also for the same entry: it then builds it itself).
    Where the build a caller waited for failed, that caller builds the entry
    itself (and raises its own error): until 2026-12-07 it returned ``None``
    (``AttributeError: 'NoneType' object has no attribute 'exported'`` in a
    second thread while the first's build timed out; a user-style probe).

    ``build_under`` (a lock a factory takes, such as Numba's compiler lock) is
    taken before the entry's own lock, and only where the entry is not built
    yet: a caller that finds the entry never waits for it.

    Examples
    --------
    >>> import threading
    >>> def f():
    ...     pass
    >>> cached_for(f, ("answer",), lambda: 42, build_under=threading.Lock())
    42
    >>> cached_for(f, ("answer",), lambda: 0)
    42
    """
    with _lock:
        entry = _table(func).get(key, _MISSING)
    if entry is not _MISSING and not isinstance(entry, _Building):
        return entry
    if build_under is None:
        return _build_once(func, key, factory)
    with build_under:
        return _build_once(func, key, factory)


def _build_once(func: Any, key: tuple, factory: Callable[[], Any]) -> Any:
    """:func:`cached_for` without ``build_under``."""
    while True:
        with _lock:
            table = _table(func)
            entry = table.get(key, _MISSING)
            if entry is _MISSING:
                entry = table[key] = _Building()
        if not isinstance(entry, _Building):
            return entry
        with entry.lock:
            with _lock:
                current = table.get(key, _MISSING)
            if current is not entry:
                if current is _MISSING or isinstance(current, _Building):
                    continue  # the build waited for failed (or another began since): try again
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


#: What :func:`cached_for` finds where no entry is (a factory may return ``None``).
_MISSING = object()


def _renew_locks_in_child() -> None:
    """After ``fork()``: locks another parent thread held would never be released in the child."""
    global _lock
    _lock = threading.Lock()
    for table in [*_tables.values(), *(t for _, t in _by_id.values())]:
        for key, entry in list(table.items()):
            if isinstance(entry, _Building):
                del table[key]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)


def forget(func: Any) -> None:
    """Drop what :func:`cached_for` remembers for ``func`` (entries being built are left to their builders)."""
    with _lock:
        table = _table(func)
        for key, entry in list(table.items()):
            if not isinstance(entry, _Building):
                del table[key]
