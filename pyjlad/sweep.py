"""The sweep a transform asks an engine for, and shadows laid out like their primals.

What the public API (:mod:`pyjlad.transforms`, :mod:`pyjlad.products`, :func:`pyjlad.autodiff`) and
the engines (:mod:`pyjlad.engines`) share without either depending on the other: a transform
describes one :class:`Sweep`; arrays get shadows addressable with their own strides
(:func:`shadow_like`); arrays whose elements share memory are found (:func:`overlaps_itself`) and
compacted (:func:`compact_overlapping`). Imports nothing of pyjlad but :mod:`pyjlad.activity` and
:mod:`pyjlad.shadow_guards` (whose zones surround each shadow).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .activity import Activity, as_activities
from .shadow_guards import guarded_zeros

__all__ = ["Sweep", "compact_overlapping", "overlaps_itself", "shadow_like"]


@dataclass(frozen=True)
class Sweep:
    """What to differentiate: one reverse/forward sweep, or a Hessian-vector product.

    Attributes
    ----------
    kind : str
        ``"ad"`` (one sweep of ``mode``) or ``"hvp"`` (reverse over forward; forward over reverse
        through custom rules).
    mode : str
        ``"reverse"`` or ``"forward"`` (``kind="ad"``).
    activities : tuple of Activity
        Per argument (missing trailing entries are ``CONST``): ``CONST``, ``DIFF`` (an adjoint
        for a scalar in reverse mode, a shadow otherwise) or ``DIFF_NONEED`` (as ``DIFF``, primal
        not needed); the concrete Enzyme activities ``ACTIVE``, ``DUP``, ``DUPNONEED`` also work.
        Given as :class:`~pyjlad.activity.Activity` members or their string values (``"diff"``),
        kept as members.
    wrt : int
        The argument of a Hessian-vector product (``kind="hvp"``).
    scalar_result : bool
        Whether the function must return a float (gradients): a function that
        returns nothing is refused instead of giving zeros.
    width : int
        Directions per sweep (Enzyme's vector mode, embedded engine; see
        :mod:`pyjlad.engines.vector_driver`): with ``width > 1`` every shadow is one
        buffer of ``width`` stacked slices.
    interleaved : tuple of int
        With ``width > 1``: the array arguments whose ``width`` shadows are one element apart,
        addressed with the primal's strides (the primal a view of the same buffer: see
        :mod:`pyjlad.vector_lanes`).
    value : bool
        Whether the caller needs the function's value (reverse mode, a float result). ``False``
        (:func:`pyjlad.grad`) lets Enzyme leave out work that only computes it, such as a loop
        summing a loss whose terms the reverse sweep reads again: the returned value is then
        meaningless.
    serial : bool
        Differentiate the serial copy of a ``parallel=True`` function even with parallel derivatives on
        (:mod:`pyjlad.parallel_derivatives`): for a caller that runs several sweeps on Numba's threads at
        once, one per thread (a Hessian's columns, :mod:`pyjlad.chunk_threads`), where each sweep's own
        parallel loops would run on one thread with nothing to gain.

    Examples
    --------
    >>> sweep = Sweep("ad", "reverse", ("diff", "const"))
    >>> sweep.activities
    (<Activity.DIFF: 'diff'>, <Activity.CONST: 'const'>)
    >>> sweep == Sweep("ad", "reverse", (Activity.DIFF, Activity.CONST))
    True
    """

    kind: str = "ad"
    mode: str = "reverse"
    activities: tuple[Activity, ...] = ()
    wrt: int = -1
    scalar_result: bool = False
    width: int = 1
    interleaved: tuple[int, ...] = ()
    value: bool = True
    serial: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "activities", as_activities(self.activities))


def overlaps_itself(x: np.ndarray) -> bool:
    """Whether two elements of ``x`` share memory (``np.broadcast_to``'s zero strides, ``as_strided``).

    Examples
    --------
    >>> import numpy as np
    >>> overlaps_itself(np.broadcast_to(np.ones(1), (3,))), overlaps_itself(np.ones((2, 3))[:, ::2])
    (True, False)
    """
    extent = x.itemsize  # bytes covered by the dimensions seen so far (a sufficient test)
    for stride, n in sorted((abs(s), n) for n, s in zip(x.shape, x.strides) if n > 1):
        if stride < extent:
            return True
        extent += stride * (n - 1)
    return False


def compact_overlapping(args: tuple[Any, ...], indices: Sequence[int]) -> tuple[Any, ...]:
    """``args`` with each array at ``indices`` whose elements share memory replaced by a C-ordered copy.

    Each element of such an array is a separate input to differentiate (as JAX sees a
    broadcast array), but Enzyme would accumulate all their adjoints into one shared
    shadow element. Such arrays are read-only views, so the function cannot have
    meant to write them.
    """
    out = list(args)
    for index in indices:
        x = out[index]
        if isinstance(x, np.ndarray) and overlaps_itself(x):
            out[index] = np.ascontiguousarray(x)
    return tuple(out)


def shadow_like(x: np.ndarray, fill: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """A zeroed (or ``fill``-ed) array addressable with ``x``'s strides.

    Enzyme indexes shadow memory exactly as the primal, so a shadow of a
    strided view is itself a view with the same strides over a fresh buffer.
    Returns the shadow and whether it is such a view.
    """
    # Inside a buffer with a guard zone on each side (pyjlad.shadow_guards): a derivative that adds into
    # an element one past the end writes there, where check_guards finds it, not into glibc's heap.
    shadow = guarded_zeros(x)
    is_view = not (x.flags.c_contiguous or x.flags.f_contiguous)
    if fill is not None:
        shadow[...] = fill
    return shadow, is_view
