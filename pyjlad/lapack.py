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
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, types

from .memo import cached_for
from .portable_pipeline import make_portable

__all__ = ["lapack_module", "LAPACK_HELPERS"]

_OPTIONS = {"error_model": "numpy", "boundscheck": False}


@njit(**_OPTIONS)
def _getrf(m, n, a_ptr, lda, ipiv_ptr):
    a = carray(a_ptr, (n, lda))  # a[j, i] is element (i, j) of the column-major matrix
    ipiv = carray(ipiv_ptr, (min(m, n),))
    info = 0
    for j in range(min(m, n)):
        p = j
        best = abs(a[j, j])
        for i in range(j + 1, m):
            if abs(a[j, i]) > best:
                best = abs(a[j, i])
                p = i
        ipiv[j] = p + 1
        if a[j, p] != 0.0:
            if p != j:
                for k in range(n):
                    t = a[k, j]
                    a[k, j] = a[k, p]
                    a[k, p] = t
            for i in range(j + 1, m):
                a[j, i] = a[j, i] / a[j, j]
        elif info == 0:
            info = j + 1
        for k in range(j + 1, n):
            f = a[k, j]
            for i in range(j + 1, m):
                a[k, i] -= a[j, i] * f
    return info


@njit(**_OPTIONS)
def _lu_solve(a, n, ipiv, b):
    """Solve with the LU factors of ``a`` (column-major view) into vector ``b`` in place."""
    for i in range(n):
        p = ipiv[i] - 1
        if p != i:
            t = b[i]
            b[i] = b[p]
            b[p] = t
    for i in range(n):
        for k in range(i):
            b[i] -= a[k, i] * b[k]
    for i in range(n - 1, -1, -1):
        for k in range(i + 1, n):
            b[i] -= a[k, i] * b[k]
        b[i] = b[i] / a[i, i]


@njit(**_OPTIONS)
def _getri(n, a_ptr, lda, ipiv_ptr):
    a = carray(a_ptr, (n, lda))
    ipiv = carray(ipiv_ptr, (n,))
    x = np.zeros((n, n), dtype=a.dtype)
    for col in range(n):
        b = x[col]
        b[col] = 1.0
        _lu_solve(a, n, ipiv, b)
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
    for col in range(nrhs):
        _lu_solve(a, n, ipiv, b[col])
    return 0


@njit(**_OPTIONS)
def _potrf(uplo, n, a_ptr, lda):
    a = carray(a_ptr, (n, lda))
    lower = uplo == 76 or uplo == 108  # 'L' / 'l'
    for j in range(n):
        s = a[j, j]
        for k in range(j):
            s -= (a[k, j] if lower else a[j, k]) ** 2
        if s <= 0.0:
            return j + 1
        d = s ** 0.5
        a[j, j] = d
        for i in range(j + 1, n):
            t = a[j, i] if lower else a[i, j]
            for k in range(j):
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
#: Numba's LAPACK helpers replaced here.
LAPACK_HELPERS = frozenset(_HELPERS)
_KINDS = {"d": types.float64, "s": types.float32}


def lapack_module(helper: str, kind: str) -> str:
    """Portable IR defining ``@<helper>.<kind>`` with the helper's C signature.

    ``kind`` is ``"d"`` (float64) or ``"s"`` (float32). The text is a complete
    module, to be linked (``llvm-link``) with the module that calls it.
    """
    return cached_for(lapack_module, (helper, kind), lambda: _build(helper, kind))


def _build(helper: str, kind: str) -> str:
    impl, params, argtypes = _HELPERS[helper]
    sig = argtypes(_KINDS[kind])
    impl.compile(sig)
    cres = impl.overloads[sig]
    entry = f"pyjlad_lapack_{helper}_{kind}"
    module = make_portable(cres.library.get_llvm_str(), cres.fndesc.mangled_name, name=entry)
    names = [p.split()[1] for p in params]
    adapter = "\n".join([
        f"define linkonce_odr i32 @{helper}.{kind}(i8 %kind, {', '.join(params)}) {{",
        "entry:",
        "  %ret = alloca i32, align 4",
        "  %exc = alloca ptr, align 8",
        "  store i32 0, ptr %ret, align 4",
        f"  %status = call i32 @{entry}(ptr %ret, ptr %exc, "
        + ", ".join(f"{p.split()[0]} {n}" for p, n in zip(params, names)) + ")",
        "  %info = load i32, ptr %ret, align 4",
        "  ret i32 %info",
        "}",
    ])
    return module.text + "\n" + adapter + "\n"
