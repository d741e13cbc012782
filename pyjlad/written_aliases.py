"""Arguments the caller passes as one memory while the function writes one of them: refused, not guessed.

``f(u, u, w)`` (an in-place update through a function written for an input and an output) has no derivative
pyjlad can give without guessing: Enzyme gives every array argument its own shadow, so the sweep mixed the
aliased run of the function (its writes land in the array it reads) with separate adjoints for the two names.
Until 2026-12-06 such a gradient was **silently wrong** (6x where the aliased call's derivative is 8x and two
separate arrays' 4x), a ``jvp`` too, while ``jacobian`` and ``hessian``, which run on private copies, gave the
separate arrays' answer. Arguments that share memory but are only read (``kernel(X, X)``) are differentiated
as usual: each name gets its adjoint, as JAX's would.

:func:`refuse_written_aliases` checks the caller's arguments before a transform copies or sweeps them:
``np.may_share_memory`` first (bounds only: two arrays take one call), then, only where that finds a pair, the
function's ABI (which arguments it writes: :attr:`pyjlad.abi.ArrayArg.writes`) and ``np.shares_memory``.

A function returning arrays or tuples, which its export refuses, is asked through a twin that drops its result
(:func:`_discarding`). :func:`pyjlad.vmap` of a derivative (``grad``, ``value_and_grad``, the
products' callable forms) checks each sample's arguments
(:func:`pyjlad.batching._refuse_aliased_samples`). Not checked: :func:`pyjlad.autodiff`, Enzyme's own vocabulary,
where the caller gives every shadow (two ``Duplicated`` of one array must then share one shadow, as in Enzyme),
and derivatives called from ``@njit`` code, which run no Python around a call.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types as nbtypes

from .abi import ArrayArg
from .errors import ArgumentError
from .export import as_numba_function, describe_function, export, numba_argtypes, result_type
from .memo import cached_for

__all__ = ["refuse_written_aliases", "overlapping_pairs", "written_arguments"]

#: Work ``np.shares_memory`` may spend on one pair of strided arrays before the pair counts as overlapping.
_MAX_WORK = 100_000


def overlapping_pairs(args: tuple[Any, ...]) -> list[tuple[int, int]]:
    """The pairs ``(i, j)``, ``i < j``, of array arguments whose memory overlaps (or may, where deciding it
    exactly would take too long).

    Examples
    --------
    >>> import numpy as np
    >>> x, y = np.ones(6), np.ones(6)
    >>> overlapping_pairs((x, x, 2.0, y)), overlapping_pairs((x[::2], x[1::2], x[3:]))
    ([(0, 1)], [(0, 2), (1, 2)])
    >>> overlapping_pairs((x[::2], x[1::2]))  # interleaved: no element in common
    []
    """
    arrays = [(i, a) for i, a in enumerate(args) if isinstance(a, np.ndarray)]
    pairs = []
    for k in range(1, len(arrays)):
        i, a = arrays[k - 1]
        for j, b in arrays[k:]:
            if _may_share(a, b) and _shares(a, b):
                pairs.append((i, j))
    return pairs


_may_share = np.may_share_memory


def _shares(a: np.ndarray, b: np.ndarray) -> bool:
    try:
        return bool(np.shares_memory(a, b, max_work=_MAX_WORK))
    except np.exceptions.TooHardError:
        return True


def _discarding(f: Any, nargs: int) -> Any:
    """``d(*args)``: ``f(*args)`` with its result dropped (one per function and arity): an ``@njit`` function whose
    export says which arguments ``f`` writes, whatever ``f`` returns."""
    def make() -> Any:
        params = ", ".join(f"a{i}" for i in range(nargs))
        namespace: dict[str, Any] = {"f": as_numba_function(f)}
        exec(f"def discarding({params}):\n    f({params})\n", namespace)  # noqa: S102 - from integers only
        return numba.njit(namespace["discarding"])
    return cached_for(f, ("discarding", nargs), make)


def written_arguments(f: Any, argtypes: tuple[Any, ...]) -> tuple[bool, ...]:
    """Which arguments ``f`` writes, for arguments of ``argtypes``: from its export, or, where it returns arrays
    or tuples (which the export refuses), from the export of :func:`_discarding` of it."""
    restype = result_type(f, argtypes)
    if not isinstance(restype, (nbtypes.Number, nbtypes.Boolean, nbtypes.NoneType)):
        f = _discarding(f, len(argtypes))
    return tuple(isinstance(a, ArrayArg) and a.writes for a in export(f, argtypes).abi.args)


def refuse_written_aliases(f: Any, args: tuple[Any, ...], transform: str) -> None:
    """Raise :class:`~pyjlad.errors.ArgumentError` where two array arguments of ``f`` share memory and ``f``
    writes one of them; do nothing otherwise (the usual case costs one ``np.may_share_memory`` per pair).

    Examples
    --------
    >>> import numpy as np, pyjlad
    >>> from numba import njit
    >>> @njit
    ... def scale(x, out):
    ...     for i in range(x.size):
    ...         out[i] = 2.0 * x[i]
    ...     return np.sum(x * out)
    >>> u = np.array([1.0, 2.0])
    >>> refuse_written_aliases(scale, (u, u.copy()), "gradient")  # separate arrays: nothing to say
    >>> refuse_written_aliases(scale, (u, u), "gradient")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pyjlad.errors.ArgumentError: gradient: arguments 0 and 1 of scale are the same memory, and scale writes argument 1...
    """
    arrays = [a for a in args if isinstance(a, np.ndarray)]
    if len(arrays) < 2 or (len(arrays) == 2 and not _may_share(*arrays)):  # the usual calls, quickly
        return
    pairs = overlapping_pairs(args)
    if not pairs:
        return
    writes = written_arguments(f, numba_argtypes(args))
    for i, j in pairs:
        written = [k for k in (i, j) if k < len(writes) and writes[k]]
        if written:
            name = describe_function(f)
            raise ArgumentError(
                f"{transform}: arguments {i} and {j} of {name} are "
                f"{'the same memory' if _same_view(args[i], args[j]) else 'overlapping views of one array'}, and "
                f"{name} writes argument {written[-1]}: its derivative would depend on which of the two names each "
                "adjoint belongs to, which pyjlad cannot tell (Enzyme gives each argument its own). To differentiate the "
                f"update in place, differentiate an @njit function that calls {name} with the same array as "
                f"arguments {i} and {j} itself; to treat them as two arrays, pass a copy (np.copy) as one of them"
            )


def _same_view(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` are views of the same elements in the same layout."""
    return (a.shape, a.strides, a.__array_interface__["data"][0]) == (b.shape, b.strides, b.__array_interface__["data"][0])
