"""``np.logaddexp``/``np.logaddexp2`` compiled, for the copy Enzyme differentiates, with their ties in smooth form.

Numba computes ``np.logaddexp(x, y)`` as NumPy's ``npy_logaddexp`` does (``numba/np/npyfuncs.py``)::

    if x == y:                          # (for infinities of one sign, without warnings)
        return x + log(2)
    d = x - y
    return x + log1p(exp(-d)) if d > 0 else y + log1p(exp(d))

Enzyme differentiates the branch taken: at a tie, ``x + log(2)``, whose derivative is ``(1, 0)``, not the
``(1/2, 1/2)`` of the smooth function, and whose second derivative is 0, not ``1/4``. Softplus written
``np.logaddexp(0.0, z)`` at ``z = 0`` (a logistic regression started at zero weights) had a wrong gradient
and a zero Hessian (a user-style probe, 2026-12-04).

Inside :func:`smooth_ties` (entered by :func:`pyjlad.enzyme_copy.branch_preserving_compile`, under Numba's
compiler lock) Numba's kernels call this module's implementations instead, whose tie is written

    x/2 + y/2 + log(2) + d*d/8        (d = x - y, taken as 0 where it is NaN: a tie of infinities)

equal to ``x + log(2)`` wherever ``x == y`` (``x/2 + y/2`` is ``x``; ``d`` is 0, or NaN for infinities, whose
value stays the infinity), with the smooth function's first and second derivatives there (those of
``(x + y)/2 + log(2 cosh(d/2))``). ``np.logaddexp2``'s tie ``x + 1`` alike, with ``ln(2) d*d/8``. The form is
written in the source, from the function's own arguments: until 2026-12-07 it was written into the IR from the
operands of the tie's comparison, which LLVM had rewritten where an argument was negated (``np.logaddexp(0.0,
-z)`` compares ``z`` with 0), and log-sigmoid ``-np.logaddexp(0.0, -z)`` got the gradient ``-1/2`` at ``z = 0``
instead of ``+1/2`` (a user-style probe). Under ``fastmath`` (no NaN assumed) a tie of infinities is NaN.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
from numba.core.extending import overload
from numba.np import npyfuncs

__all__ = ["smooth_ties"]


def _logaddexp(x1: float, x2: float) -> float:
    """Stands for ``np.logaddexp``'s kernel in the copy (implemented by :func:`_overload_with_smooth_tie`)."""


def _logaddexp2(x1: float, x2: float) -> float:
    """Stands for ``np.logaddexp2``'s kernel in the copy."""


def _overload_with_smooth_tie(stub: Any, shift: float, curvature: float, log1p: Any, exp: Any) -> None:
    """Numba's kernel for ``stub`` (``npyfuncs._generate_logaddexp``) with the tie ``x + shift`` in smooth form:
    ``curvature * d*d`` is the smooth function's second derivative there, halved."""

    @overload(stub, target="generic")
    def _implementation(x1, x2):  # noqa: ANN001, ANN202 - Numba compares these names with impl's
        if x1 != x2:
            return None
        s, c, half, zero = x1(shift), x1(curvature), x1(0.5), x1(0.0)

        def impl(x1, x2):  # noqa: ANN001, ANN202 - compiled by Numba
            x, y = x1, x2
            if x == y:
                d = x - y
                if d != d:  # infinities of one sign
                    d = zero
                return half * x + half * y + s + c * (d * d)
            tmp = x - y
            if tmp > 0:
                return x + log1p(exp(-tmp))
            elif tmp <= 0:
                return y + log1p(exp(tmp))
            return tmp  # NaN

        return impl


_overload_with_smooth_tie(_logaddexp, math.log(2.0), 0.125, np.log1p, np.exp)
_overload_with_smooth_tie(_logaddexp2, 1.0, math.log(2.0) / 8.0, npyfuncs.npy_log2_1p, np.exp2)


@contextlib.contextmanager
def smooth_ties() -> Iterator[None]:
    """Inside the block, Numba compiles ``np.logaddexp``/``np.logaddexp2`` with their ties in smooth form.

    Numba's kernels (``np_real_logaddexp_impl``) look their implementation up by its global name in
    ``numba.np.npyfuncs`` at each compile; hold Numba's compiler lock around the block.
    """
    saved = npyfuncs._npy_logaddexp, npyfuncs._npy_logaddexp2
    npyfuncs._npy_logaddexp, npyfuncs._npy_logaddexp2 = _logaddexp, _logaddexp2
    try:
        yield
    finally:
        npyfuncs._npy_logaddexp, npyfuncs._npy_logaddexp2 = saved
