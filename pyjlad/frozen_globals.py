"""Global and closure arrays (and numbers) Numba froze into a function, and whether they have changed since.

Numba compiles a global or closure array of at most 1 MB (C or F contiguous), or number, into the function as a
constant: ``f`` keeps the values the array had when Numba compiled it, whatever the array holds later. pyjlad's
derivative is built from copies of ``f`` it compiles itself, later, which read the array again. Until
2026-12-06 an array changed in place between the two compiles gave a derivative of the new values beside an
``f`` of the old ones (``value_and_grad``'s value 142.5 where ``f(x)`` gave 14.25: found by a user-style probe).

:func:`watch` (called when pyjlad is imported) listens to Numba's ``numba:compile`` event and records, for
each dispatcher and signature it compiles, a fingerprint of the arrays it froze (:func:`fingerprint`). Then

* :func:`refuse_changed` (at pyjlad's export) refuses, in the user's terms, a function whose arrays have
  changed since Numba compiled the signature being differentiated;
* a dispatcher Numba compiles again for a signature whose arrays changed (``f.recompile()``) has pyjlad's
  derivatives of it built again from the new values: what pyjlad remembers for it is dropped
  (:func:`pyjlad.memo.forget`) and each compiled sweep of it that :func:`follow` registered is reset, the
  transforms taken before (``g = pyjlad.grad(f)``) included;
* :func:`recompile_if_changed` (at each call of a compiled sweep of a plain Python function) has Numba compile
  pyjlad's own ``numba.njit`` of it again where what it reads changed: the plain function reads its globals at
  each call, and so must its derivatives (until 2026-12-06 they kept the values of their first build: the first
  cross-validation fold's gradient for the next, found by a user-style probe).

The ``@njit`` functions ``f`` calls count as frozen values by what their code does (:func:`_code_digest`): a
helper defined anew with another body, then ``f.recompile()``, rebuilds ``f``'s derivatives (until 2026-12-06
they kept the old helper's). The copies pyjlad compiles are keyed by the fingerprint of now, so a signature Numba
compiles after a change (``float32``, a strided view) is differentiated with the values it holds (until
2026-12-06, with those of pyjlad's first build).

What compiled before pyjlad was imported, or came from Numba's disk cache (``cache=True``), has no record
and is not checked. Arrays over 1 MB, or not contiguous, are not frozen (Numba reads them where they are), so
``f`` and its derivatives see their current values alike.
"""

from __future__ import annotations

import dis
import functools
import hashlib
import types
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba import types as nbtypes
from numba.core import event
from numba.core.dispatcher import Dispatcher

from .errors import UnsupportedFunctionError
from .log import get_logger
from .memo import forget

__all__ = ["filled", "fingerprint", "follow", "frozen_arrays", "own", "recompile_if_changed", "refuse_changed", "watch"]

_log = get_logger(__name__)

#: Numba freezes a contiguous global array up to this many bytes (``BaseContext.make_constant_array``).
FREEZE_LIMIT = 10**6
_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME"})
_CLOSURE_LOADS = frozenset({"LOAD_DEREF", "LOAD_CLASSDEREF"})
_ATTRIBUTE_LOADS = frozenset({"LOAD_ATTR", "LOAD_METHOD"})
_records: weakref.WeakKeyDictionary[Any, dict[tuple, tuple]] = weakref.WeakKeyDictionary()
_latest: weakref.WeakKeyDictionary[Any, tuple] = weakref.WeakKeyDictionary()  # each dispatcher's last compile
_followers: weakref.WeakKeyDictionary[Any, weakref.WeakSet] = weakref.WeakKeyDictionary()
_owners: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()  # pyjlad's njit -> the plain function


def own(dispatcher: Any, func: Any) -> None:
    """Record ``dispatcher`` as pyjlad's ``numba.njit`` of the plain Python function ``func``: what follows
    ``func`` is reset with what follows ``dispatcher``."""
    _owners[dispatcher] = func


def follow(func: Any, follower: Any) -> None:
    """Call ``follower.reset()`` whenever Numba compiles ``func`` again with other values of its frozen arrays
    (held weakly; nothing happens for a ``func`` that cannot be referenced weakly)."""
    try:
        _followers.setdefault(func, weakref.WeakSet()).add(follower)
    except TypeError:
        pass


@functools.lru_cache(maxsize=4096)
def _names_read(code: types.CodeType) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """:func:`_loaded_names` of ``code``, read once (a plain function is fingerprinted at each call)."""
    return tuple(_loaded_names(code))


def _loaded_names(code: types.CodeType) -> Iterator[tuple[str, tuple[str, ...]]]:
    """``("global" | "closure", (name, attribute, ...))`` for each global or closure variable ``code`` (and the
    code it nests) reads, with the attributes read from it right after (``constants.G`` for a module)."""
    chain: list[str] | None = None
    kind = ""
    for instruction in dis.get_instructions(code):
        if chain is not None and instruction.opname in _ATTRIBUTE_LOADS:
            chain.append(instruction.argval)
            continue
        if chain is not None:
            yield kind, tuple(chain)
            chain = None
        if instruction.opname in _GLOBAL_LOADS or instruction.opname in _CLOSURE_LOADS:
            kind = "global" if instruction.opname in _GLOBAL_LOADS else "closure"
            chain = [instruction.argval]
    if chain is not None:
        yield kind, tuple(chain)
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _loaded_names(constant)


_NUMBERS = (bool, int, float, complex, np.number, np.bool_)


def _frozen(value: Any) -> list[np.ndarray]:
    """The arrays Numba would freeze for ``value`` (an array, a number as a 0-d array, or a tuple holding them)."""
    if isinstance(value, np.ndarray):
        contiguous = value.flags.c_contiguous or value.flags.f_contiguous
        return [value] if contiguous and value.nbytes <= FREEZE_LIMIT else []
    if isinstance(value, _NUMBERS):
        return [np.asarray(value)]
    if isinstance(value, tuple):
        return [array for item in value for array in _frozen(item)]
    return []


def filled(cell: types.CellType) -> bool:
    """Whether a closure ``cell`` holds a value (an empty one raises when read)."""
    try:
        cell.cell_contents  # noqa: B018  (an empty cell raises)
    except ValueError:
        return False
    return True


def _read_globals(py_func: Any) -> Iterator[tuple[str, Any]]:
    """``(name, value)`` of each global or closure variable ``py_func`` reads (``constants.G`` for an attribute of a
    module it reads)."""
    namespace = getattr(py_func, "__globals__", {})
    code = getattr(py_func, "__code__", None)
    if code is None:
        return
    cells = {name: cell.cell_contents for name, cell in zip(code.co_freevars, py_func.__closure__ or (), strict=False)
             if filled(cell)}
    for kind, chain in _names_read(code):
        scope = namespace if kind == "global" else cells
        if chain[0] not in scope:
            continue
        value = scope[chain[0]]
        for depth, attribute in enumerate(chain[1:], start=1):
            if not isinstance(value, types.ModuleType):
                chain = chain[:depth]
                break
            value = getattr(value, attribute, None)
        yield ".".join(chain), value


def frozen_arrays(py_func: Any) -> dict[str, np.ndarray]:
    """The global and closure arrays Numba freezes into ``py_func`` (a dispatcher's ``py_func``), by the name
    ``py_func`` reads them with (not those of the functions it calls).

    Examples
    --------
    >>> import numpy as np
    >>> G = np.ones(3)
    >>> def f(x):
    ...     return np.sum(G * x)
    >>> list(frozen_arrays(f))
    ['G']
    """
    found: dict[str, np.ndarray] = {}
    for name, value in _read_globals(py_func):
        for index, array in enumerate(_frozen(value)):
            found[name + (f"[{index}]" if isinstance(value, tuple) else "")] = array
    return found


def _callees(py_func: Any) -> list[tuple[str, Any]]:
    """``(name, dispatcher)`` of the ``@njit`` functions ``py_func`` reads as globals or closure variables (those it
    may call)."""
    return [(name, value) for name, value in _read_globals(py_func) if isinstance(value, Dispatcher)]


def _code_digest(code: types.CodeType) -> bytes:
    """A digest of what ``code`` does (its bytecode, names and constants, those of the code it nests included), the
    same for the same source defined again (a notebook cell run again)."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for constant in code.co_consts:
        digest.update(_code_digest(constant) if isinstance(constant, types.CodeType) else repr(constant).encode())
    return digest.digest()


def _label(py_func: Any) -> str:
    return getattr(py_func, "__name__", None) or repr(py_func)


def fingerprint(py_func: Any, recorded: bool = False) -> tuple[tuple[str, str, str, tuple[int, ...], bytes], ...]:
    """What the arrays Numba freezes into ``py_func`` and into the ``@njit`` functions it calls hold now: for
    each, the function reading it, its name, dtype, shape and a digest of its bytes. ``recorded``: a callee's
    as Numba last compiled it (its record), where there is one: what ``py_func`` links, compiled now.

    >>> import numpy as np
    >>> G = np.ones(3)
    >>> def f(x):
    ...     return np.sum(G * x)
    >>> before = fingerprint(f)
    >>> G[0] = 2.0
    >>> fingerprint(f) == before
    False
    """
    items = _parts(py_func, recorded, {id(py_func)})
    return tuple(sorted(set(items)))


def _parts(py_func: Any, recorded: bool, seen: set[int]) -> list[tuple[str, str, str, tuple[int, ...], bytes]]:
    label = _label(py_func)
    items = [(label, name, array.dtype.str, array.shape,
              _digest(array))
             for name, array in frozen_arrays(py_func).items()]
    for name, callee in _callees(py_func):
        # The function it calls, by what it does: a helper defined anew (then f.recompile()) is a change too.
        items.append((label, name, "function", (), _code_digest(callee.py_func.__code__)))
        if id(callee.py_func) in seen:
            continue
        seen.add(id(callee.py_func))
        last = _latest.get(callee) if recorded else None
        items.extend(last if last is not None else _parts(callee.py_func, recorded, seen))
    return items


def _digest(array: np.ndarray) -> bytes:
    """A digest of ``array``'s bytes (SHA-1: about 2 GB/s here, a plain function's arrays are digested at each call;
    a change, not an adversary, is what it detects)."""
    data = array if array.flags.c_contiguous and not array.dtype.hasobject else array.tobytes(order="A")
    return hashlib.sha1(data, usedforsecurity=False).digest()


def _changed(before: tuple, now: tuple) -> list[tuple[str, str]]:
    """``(function, array)`` of the arrays whose fingerprints differ between ``before`` and ``now``."""
    old, new = ({item[:2]: item[2:] for item in side} for side in (before, now))
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


class _CompileListener(event.Listener):
    """Records each dispatcher's fingerprint when Numba has compiled it for a signature."""

    def on_start(self, event: event.Event) -> None:
        pass

    def on_end(self, event: event.Event) -> None:
        try:
            dispatcher, args = event.data["dispatcher"], tuple(event.data["args"])
            now = fingerprint(dispatcher.py_func, recorded=True)
            record = _records.setdefault(dispatcher, {})
            before = record.get(args)
            record[args] = _latest[dispatcher] = now
        except Exception:  # noqa: BLE001  (a record is a courtesy; it must never break a Numba compile)
            _log.debug("no frozen-array record for a Numba compile", exc_info=True)
            return
        if before is not None and before != now:
            # Compiled again with other values (f.recompile()): derivatives built from the old ones are dropped.
            # (No lock is taken here, inside Numba's compile: a follower's reset only replaces its tables.)
            owner = _owners.get(dispatcher)
            for follower in [*_followers.get(dispatcher, ()), *(_followers.get(owner, ()) if owner else ())]:
                follower.reset()
            forget(dispatcher)


_listener = _CompileListener()
_watching: list[bool] = []


def watch() -> None:
    """Listen to Numba's compiles (once per process)."""
    if not _watching:
        event.register("numba:compile", _listener)
        _watching.append(True)


def recompile_if_changed(dispatcher: Any) -> None:
    """Have Numba compile ``dispatcher`` again where what it froze (arrays, numbers, the functions it calls) has
    changed since it last compiled it: for pyjlad's own ``numba.njit`` of a plain Python function, which reads its
    globals at each call (the recompile drops the derivatives built from the old values, as for ``f.recompile()``).
    """
    last = _latest.get(dispatcher)
    if last is not None and fingerprint(dispatcher.py_func, recorded=True) != last:
        _log.debug("%s: its globals changed since Numba compiled it; compiling it again", _label(dispatcher.py_func))
        dispatcher.recompile()


def refuse_changed(dispatcher: Any, argtypes: tuple, name: str, *, stands_for_contiguous: bool = False) -> None:
    """Refuse ``dispatcher`` (the user's function ``name``, or pyjlad's wrapper of it) for ``argtypes`` where an
    array Numba froze into it, or into an ``@njit`` function it calls, has changed since Numba compiled it.
    ``stands_for_contiguous``: ``argtypes`` are pyjlad's strided views standing for the caller's contiguous arrays
    (vector mode), which Numba compiles now, with the values of now: checked against the contiguous signature's.

    Raises
    ------
    UnsupportedFunctionError
        Naming the arrays, and the two ways to make ``f`` and its derivatives agree.
    """
    records = _records.get(dispatcher, {})
    signatures = [tuple(argtypes)]
    if stands_for_contiguous:
        signatures.append(tuple(t.copy(layout="C") if isinstance(t, nbtypes.Array) else t for t in argtypes))
    signatures = [signature for signature in signatures if signature in records]
    if not signatures:
        return
    now = fingerprint(dispatcher.py_func)
    changed = next((found for signature in signatures if (found := _changed(records[signature], now))), [])
    if not changed:
        return
    user = name.rpartition(".")[2]
    arrays = ", ".join(f"`{array}`" + (f" (read by {reader})" if reader != user else "") for reader, array in changed)
    readers = sorted({reader for reader, _ in changed} - {user})
    recompile = "".join(f"{reader}.recompile(), then " for reader in readers) + f"{user}.recompile()"
    raise UnsupportedFunctionError(
        f"{name} reads the global or closure value(s) {arrays}, changed since Numba compiled it for "
        f"({', '.join(map(str, argtypes))}). Numba froze their old values into {user}, and a derivative built now "
        f"would use the new ones: the two would disagree. Call {recompile} after changing them (then {user} and "
        "its derivatives use the new values), or pass the value to the function as an argument.")
