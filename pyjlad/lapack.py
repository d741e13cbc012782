"""LAPACK for differentiated code: Numba's LAPACK helpers, reimplemented as code Enzyme can read.

``np.linalg.solve``, ``inv``, ``det`` and ``cholesky`` call Numba's helpers
``numba_xxgetrf``, ``numba_ez_xxgetri``, ``numba_xgesv`` and ``numba_xxpotrf``,
which reach Fortran LAPACK through function pointers Enzyme cannot follow.
Here the same factorizations (LU with partial pivoting, inverse and solve from
the LU factors, Cholesky) are written as plain Numba loops over the
column-major buffers the helpers receive; compiled by Numba and made portable,
they are linked into the differentiated module in place of the helpers, with
the helpers' C signatures. Enzyme then differentiates straight through them.

They are O(n^3) scalar loops: fine for the small and medium matrices of
statistics and physics code, slower than LAPACK for large ones.

Written for Enzyme's tape (each value a reverse sweep needs and cannot
recompute is cached, in an allocation per loop nest and call):

* compiled like the code Enzyme gets (:func:`pyjlad.enzyme_copy.unvectorized_copy`):
  no unrolling, peeling or vectorizing, each of which multiplies the cached values
  and their allocations;
* every inner loop runs over a whole dimension (``range(n)``) and picks its
  triangle with a test (``if k < i``), never ``range(i)`` or ``range(j + 1, m)``:
  Enzyme sizes a loop nest's cache in one allocation when the inner trip counts
  do not depend on the outer index, and makes one ``malloc`` per outer iteration
  when they do;
* the inverse and the solves write each value once (the factors copied before
  the output overwrites them, forward and back substitution into arrays of their
  own), so Enzyme reads them back instead of caching every load.

Before, an 8x8 inverse per voxel of seed 003's ``remote_stats`` made Enzyme
allocate a cache per outer iteration of each loop nest (and per unrolled or
peeled copy), and the gradient spent most of its time in the C library's allocator: 1,910 ms over 20,000 voxels before, see
``benchmarks/RESULTS.md`` (section ``parallel``) for after. The tests skip about
half the iterations of each nest: cheap next to those allocations for the small
matrices these loops are for. LU keeps its in-place elimination: a version writing
each elimination step into a stage of its own was slower (Enzyme cannot tell the
stages apart within one array and cached them all the same).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numba import carray, njit, types

from .enzyme_copy import branch_preserving_compile, unvectorized_copy
from .errors import IRError
from .inverse_calls import INVERSE
from .memo import cached_for
from .portable_pipeline import make_portable

__all__ = ["compiled_helper", "lapack_module", "LAPACK_HELPERS"]

_OPTIONS = {"error_model": "numpy", "boundscheck": False}


@njit(**_OPTIONS)
def _getrf(m, n, a_ptr, lda, ipiv_ptr):
    a = carray(a_ptr, (n, lda))  # a[j, i] is element (i, j) of the column-major matrix
    ipiv = carray(ipiv_ptr, (min(m, n),))
    info = 0
    for j in range(min(m, n)):
        p = j
        best = abs(a[j, j])
        for i in range(m):
            if i > j and abs(a[j, i]) > best:
                best = abs(a[j, i])
                p = i
        ipiv[j] = p + 1
        if a[j, p] != 0.0:
            if p != j:
                for k in range(n):
                    t = a[k, j]
                    a[k, j] = a[k, p]
                    a[k, p] = t
            pivot = a[j, j]
            for i in range(m):
                if i > j:
                    a[j, i] = a[j, i] / pivot
        elif info == 0:
            info = j + 1
        for k in range(n):
            if k > j:
                f = a[k, j]
                for i in range(m):
                    if i > j:
                        a[k, i] -= a[j, i] * f
    return info


@njit(inline="always", **_OPTIONS)
def _row_order(n, ipiv):
    """Row ``r`` of the matrix after ``ipiv``'s interchanges (applied in order) is row ``order[r]`` before."""
    order = np.arange(n)
    for i in range(n):
        p = ipiv[i] - 1
        t = order[i]
        order[i] = order[p]
        order[p] = t
    return order


@njit(inline="always", **_OPTIONS)
def _lu_solve(lu, n, order, rhs, nrhs, identity):
    """``x[c]`` solving ``L U x[c] = P^T rhs[c]`` for each of ``nrhs`` columns, into a new array.

    ``lu`` holds the factors and ``rhs`` the right-hand sides as column-major views (``[column, row]``);
    both are only read, and each value is written once. With ``identity``, ``rhs`` is not read: the
    right-hand sides are the columns of the identity (the inverse).
    """
    y = np.empty((nrhs, n), dtype=lu.dtype)  # y[c] solves L y = P^T rhs[c]
    for c in range(nrhs):
        for i in range(n):
            s = (1.0 if order[i] == c else 0.0) if identity else rhs[c, order[i]]
            for k in range(n):
                if k < i:
                    s -= lu[k, i] * y[c, k]
            y[c, i] = s
    x = np.empty((nrhs, n), dtype=lu.dtype)  # x[c] solves U x = y[c]
    for c in range(nrhs):
        for r in range(n):
            i = n - 1 - r
            s = y[c, i]
            for k in range(n):
                if k > i:
                    s -= lu[k, i] * x[c, k]
            x[c, i] = s / lu[i, i]
    return x


@njit(**_OPTIONS)
def _getri(n, a_ptr, lda, ipiv_ptr):
    a = carray(a_ptr, (n, lda))
    ipiv = carray(ipiv_ptr, (n,))
    lu = np.empty((n, n), dtype=a.dtype)  # the factors, read after ``a`` is overwritten by the inverse
    for j in range(n):
        for i in range(n):
            lu[j, i] = a[j, i]
    x = _lu_solve(lu, n, _row_order(n, ipiv), lu, n, True)
    for j in range(n):
        for i in range(n):
            a[j, i] = x[j, i]
    return 0


@njit(**_OPTIONS)
def _gesv(n, nrhs, a_ptr, lda, ipiv_ptr, b_ptr, ldb):
    info = _getrf(n, n, a_ptr, lda, ipiv_ptr)
    if info != 0:
        return info
    a = carray(a_ptr, (n, lda))
    ipiv = carray(ipiv_ptr, (n,))
    b = carray(b_ptr, (nrhs, ldb))
    x = _lu_solve(a, n, _row_order(n, ipiv), b, nrhs, False)
    for c in range(nrhs):
        for i in range(n):
            b[c, i] = x[c, i]
    return 0


@njit(**_OPTIONS)
def _potrf(uplo, n, a_ptr, lda):
    a = carray(a_ptr, (n, lda))
    lower = uplo == 76 or uplo == 108  # 'L' / 'l'
    for j in range(n):
        s = a[j, j]
        for k in range(n):
            if k < j:
                s -= (a[k, j] if lower else a[j, k]) ** 2
        if s <= 0.0:
            return j + 1
        d = s ** 0.5
        a[j, j] = d
        for i in range(n):
            if i > j:
                t = a[j, i] if lower else a[i, j]
                for k in range(n):
                    if k < j:
                        t -= (a[k, i] * a[k, j]) if lower else (a[i, k] * a[j, k])
                if lower:
                    a[j, i] = t / d
                else:
                    a[i, j] = t / d
    return 0


# helper name -> (implementation, its LLVM parameters after the kind, its Numba argument types for T)
_HELPERS = {
    "numba_xxgetrf": (_getrf, ["i64 %m", "i64 %n", "ptr %a", "i64 %lda", "ptr %ipiv"],
                      lambda T: (types.int64, types.int64, types.CPointer(T), types.int64, types.CPointer(types.int32))),
    "numba_ez_xxgetri": (_getri, ["i64 %n", "ptr %a", "i64 %lda", "ptr %ipiv"],
                         lambda T: (types.int64, types.CPointer(T), types.int64, types.CPointer(types.int32))),
    "numba_xgesv": (_gesv, ["i64 %n", "i64 %nrhs", "ptr %a", "i64 %lda", "ptr %ipiv", "ptr %b", "i64 %ldb"],
                    lambda T: (types.int64, types.int64, types.CPointer(T), types.int64, types.CPointer(types.int32),
                               types.CPointer(T), types.int64)),
    "numba_xxpotrf": (_potrf, ["i8 %uplo", "i64 %n", "ptr %a", "i64 %lda"],
                      lambda T: (types.int8, types.int64, types.CPointer(T), types.int64)),
}
#: Numba's LAPACK helpers replaced here, and the inverse's call (:mod:`pyjlad.inverse_calls`).
LAPACK_HELPERS = frozenset(_HELPERS) | {INVERSE}
_KINDS = {"d": types.float64, "s": types.float32}


def lapack_module(helper: str, kind: str) -> str:
    """Portable IR defining ``@<helper>.<kind>`` with the helper's C signature.

    ``kind`` is ``"d"`` (float64) or ``"s"`` (float32). The text is a complete
    module, to be linked (``llvm-link``) with the module that calls it.
    """
    return cached_for(lapack_module, (helper, kind), lambda: _build(helper, kind))


def compiled_helper(impl: Any, sig: tuple[types.Type, ...], entry: str) -> tuple[str, str]:
    """``(portable module text, entry symbol)`` of the ``@njit`` function ``impl`` compiled for ``sig``, its
    entry named ``entry`` (Numba's ABI: ``i32 @entry(ptr %ret, ptr %excinfo, args...)``, the function's result
    stored through ``%ret``: an ``i64``, which callers must give room for).

    Raises
    ------
    IRError
        If ``impl`` does not return an ``int64`` (the slot its callers allocate).
    """
    # Compiled as the code Enzyme gets is (see pyjlad.enzyme_copy): no unrolling, peeling or vectorizing,
    # each of which gives Enzyme more values to cache, each in an allocation of its own.
    impl = unvectorized_copy(impl)
    with branch_preserving_compile():
        impl.compile(sig)
    cres = impl.overloads[sig]
    if types.unliteral(cres.signature.return_type) != types.int64:
        raise IRError(f"pyjlad's LAPACK helper {entry} returns {cres.signature.return_type}, not int64")
    return make_portable(cres.library.get_llvm_str(), cres.fndesc.mangled_name, name=entry).text + "\n", entry


def _build(helper: str, kind: str) -> str:
    if helper == INVERSE:
        from .lapack_inverse import inverse_module

        return inverse_module(kind)
    impl, params, argtypes = _HELPERS[helper]
    text, entry = compiled_helper(impl, argtypes(_KINDS[kind]), f"pyjlad_lapack_{helper}_{kind}")
    names = [p.split()[1] for p in params]
    adapter = "\n".join([
        f"define linkonce_odr i32 @{helper}.{kind}(i8 %kind, {', '.join(params)}) {{",
        "entry:",
        # The helper stores its int64 result here: a slot of 4 bytes (as it was) made that store undefined
        # behaviour, which LLVM removed, and the status read back was always 0: a singular matrix's
        # LinAlgError was lost and its derivative came out infinite or NaN.
        "  %ret = alloca i64, align 8",
        "  %exc = alloca ptr, align 8",
        "  store i64 0, ptr %ret, align 8",
        f"  %status = call i32 @{entry}(ptr %ret, ptr %exc, "
        + ", ".join(f"{p.split()[0]} {n}" for p, n in zip(params, names)) + ")",
        "  %result = load i64, ptr %ret, align 8",
        "  %info = trunc i64 %result to i32",
        "  ret i32 %info",
        "}",
    ])
    return text + adapter + "\n"
