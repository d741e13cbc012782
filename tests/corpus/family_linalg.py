"""Linear algebra: products, traces, solves, inverses, determinants, norms and their compositions.

Matrices are well conditioned (near ``2 I``, or symmetric positive definite) so that the
float64 oracle is accurate to far below the tolerances. The decompositions Numba implements
with LAPACK routines pyjlad has no derivative for (``eigh``, ``svd``, ``qr``, ``lstsq``) are
checked to be refused.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, normal, spd, well_conditioned
from corpus.program import program

FAMILY = "linalg"
SMOOTH = ("gradient", "hvp")

def _lapack(what: str) -> dict[str, str]:
    return {"expect": "refused", "notes": f"{what}: Numba calls a LAPACK routine pyjlad has no derivative for "
                                          "(a known limit, refused with advice)"}


@njit
def dot_vv(x, y):
    return np.dot(x, y)


@njit
def vdot(x, y):
    return np.vdot(x, y) ** 2


@njit
def matvec(a, x):
    return a @ x


@njit
def vecmat(x, a):
    return np.dot(x, a)


@njit
def matmul(a, b):
    return a @ b


@njit
def gram(a):
    return a.T @ a


@njit
def quad_form(a, x):
    return x @ a @ x


@njit
def outer(x, y):
    return np.outer(x, y)


@njit
def trace(a):
    return np.trace(a @ a)


@njit
def trace_plain(a):
    return np.trace(a) ** 2


@njit
def kron(a, b):
    return np.kron(a, b)


@njit
def cross(x, y):
    return np.cross(x, y)


@njit
def solve_vec(a, b):
    return np.linalg.solve(a, b)


@njit
def solve_mat(a, b):
    return np.linalg.solve(a, b)


@njit
def solve_spd(a, b):
    return np.sum(np.linalg.solve(a @ a.T + np.eye(a.shape[0]), b) ** 2)


@njit
def inv(a):
    return np.linalg.inv(a)


@njit
def inv_sum(a):
    return np.sum(np.linalg.inv(a) ** 2)


@njit
def inv_product(b, c):
    return np.linalg.inv(b @ c)


@njit
def det(a):
    return np.linalg.det(a)


@njit
def det_product(b, c):
    return np.linalg.det(b @ c)


@njit
def log_det(a):
    return np.log(np.linalg.det(a))


@njit
def slogdet(a):
    sign, logdet = np.linalg.slogdet(a)
    return sign * logdet


@njit
def norm_vec(x):
    return np.linalg.norm(x)


@njit
def norm_vec_1(x):
    return np.linalg.norm(x, 1)


@njit
def norm_vec_inf(x):
    return np.linalg.norm(x, np.inf)


@njit
def norm_mat_fro(a):
    return np.linalg.norm(a)


@njit
def norm_mat_1(a):
    return np.linalg.norm(a, 1)


@njit
def norm_mat_inf(a):
    return np.linalg.norm(a, np.inf)


@njit
def cholesky(a):
    return np.linalg.cholesky(a)


@njit
def cholesky_logdet(a):
    return 2.0 * np.sum(np.log(np.diag(np.linalg.cholesky(a))))


@njit
def matrix_power(a):
    return np.linalg.matrix_power(a, 3)


@njit
def least_squares_normal(a, b):
    return np.linalg.solve(a.T @ a, a.T @ b)


@njit
def gram_solve(a, b):
    return np.linalg.solve(a.T @ a, b)


@njit
def gram_quad_form(a, x):
    return x @ (a @ a.T) @ x


@njit
def gaussian_nll(a, x):
    s = a @ a.T + np.eye(a.shape[0])
    return 0.5 * x @ np.linalg.solve(s, x) + 0.5 * np.log(np.linalg.det(s))


@njit
def eigvalsh_sum(a):
    return np.sum(np.linalg.eigvalsh(a) ** 2)


@njit
def svd_values(a):
    return np.sum(np.linalg.svd(a)[1])


@njit
def lstsq(a, b):
    return np.linalg.lstsq(a, b)[0]


@njit
def qr_r(a):
    return np.sum(np.linalg.qr(a)[1] ** 2)


@njit
def pinv(a):
    return np.linalg.pinv(a)


def _lower(a):
    """The symmetric matrix Numba's (LAPACK's) Cholesky factorises: ``a``'s lower triangle, mirrored.

    ``np.linalg.cholesky`` reads only the lower triangle, so its derivative with respect to the
    upper triangle is zero; ``jnp.linalg.cholesky`` symmetrises its input instead.
    """
    return jnp.tril(a) + jnp.tril(a, -1).T


def _cholesky(a):
    return jnp.linalg.cholesky(_lower(a))


def _slogdet(a):
    sign, logdet = jnp.linalg.slogdet(a)
    return sign * logdet


def _gaussian_nll(a, x):
    s = a @ a.T + jnp.eye(a.shape[0])
    return 0.5 * x @ jnp.linalg.solve(s, x) + 0.5 * jnp.log(jnp.linalg.det(s))


def _solve_spd(a, b):
    return jnp.sum(jnp.linalg.solve(a @ a.T + jnp.eye(a.shape[0]), b) ** 2)


def _norm_mat_1(a):
    return jnp.max(jnp.sum(jnp.abs(a), axis=0))


def _norm_mat_inf(a):
    return jnp.max(jnp.sum(jnp.abs(a), axis=1))


A3 = well_conditioned(3)

program(FAMILY, "dot_vv/1d", dot_vv, jnp.dot, args(normal(5), normal(5)), wrt=(0, 1), transforms=SMOOTH)
program(FAMILY, "dot_vv/1d-strided", dot_vv, jnp.dot, args(normal(5, kind="strided"), normal(5, kind="reversed")),
        wrt=(0, 1))
program(FAMILY, "dot_vv/1d-f32", dot_vv, jnp.dot, args(normal(5, dtype=np.float32), normal(5, dtype=np.float32)),
        wrt=(0, 1), **F32)
program(FAMILY, "vdot/1d", vdot, lambda x, y: jnp.vdot(x, y) ** 2, args(normal(4), normal(4)), wrt=(0, 1))
program(FAMILY, "matvec/2d", matvec, lambda a, x: a @ x, args(normal(3, 4), normal(4)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "matvec/2d-F", matvec, lambda a, x: a @ x, args(normal(3, 4, kind="F"), normal(4)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "matvec/2d-transposed-f32", matvec, lambda a, x: a @ x,
        args(normal(3, 4, kind="transposed", dtype=np.float32), normal(4, dtype=np.float32)), wrt=(0, 1),
        transforms=ARRAY, **F32)
program(FAMILY, "vecmat/2d", vecmat, jnp.dot, args(normal(3), normal(3, 2)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "matmul/2d", matmul, lambda a, b: a @ b, args(normal(2, 3), normal(3, 2)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "matmul/2d-strided", matmul, lambda a, b: a @ b,
        args(normal(2, 3, kind="strided"), normal(3, 2, kind="transposed")), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "matmul/2d-f32", matmul, lambda a, b: a @ b,
        args(normal(2, 3, dtype=np.float32), normal(3, 2, dtype=np.float32)), wrt=(0, 1), transforms=ARRAY, **F32)
program(FAMILY, "gram/2d", gram, lambda a: a.T @ a, args(normal(3, 2)), transforms=ARRAY)
program(FAMILY, "gram/2d-F", gram, lambda a: a.T @ a, args(normal(3, 2, kind="F")), transforms=ARRAY)
program(FAMILY, "quad_form/2d", quad_form, lambda a, x: x @ a @ x, args(normal(3, 3), normal(3)), wrt=(0, 1))
program(FAMILY, "quad_form/2d-hvp", quad_form, lambda a, x: x @ a @ x, args(normal(3, 3), normal(3)), wrt=(1,),
        transforms=("hvp",))
program(FAMILY, "outer/1d", outer, jnp.outer, args(normal(3), normal(2)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "outer/1d-reversed", outer, jnp.outer, args(normal(3, kind="reversed"), normal(2)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "trace/2d", trace, lambda a: jnp.trace(a @ a), args(normal(3, 3)), transforms=SMOOTH)
program(FAMILY, "trace_plain/2d-transposed", trace_plain, lambda a: jnp.trace(a) ** 2,
        args(normal(3, 3, kind="transposed")))
program(FAMILY, "kron/2d", kron, jnp.kron, args(normal(2, 2), normal(2, 2)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "cross/1d", cross, jnp.cross, args(normal(3), normal(3)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "solve_vec/2d", solve_vec, jnp.linalg.solve, args(A3, normal(3)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "solve_vec/2d-F", solve_vec, jnp.linalg.solve, args(well_conditioned(3, kind="F"), normal(3)),
        wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "solve_vec/2d-f32", solve_vec, jnp.linalg.solve,
        args(well_conditioned(3, dtype=np.float32), normal(3, dtype=np.float32)), wrt=(0, 1), transforms=ARRAY,
        **F32)
program(FAMILY, "solve_mat/2d", solve_mat, jnp.linalg.solve, args(A3, normal(3, 2)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "solve_spd/2d", solve_spd, _solve_spd, args(normal(3, 3), normal(3)), wrt=(0, 1))
program(FAMILY, "inv/2d", inv, jnp.linalg.inv, args(A3), transforms=ARRAY)
program(FAMILY, "inv/2d-transposed", inv, jnp.linalg.inv, args(well_conditioned(3, kind="transposed")),
        transforms=("jacobian", "vjp"))
program(FAMILY, "inv/2d-transposed-jvp", inv, jnp.linalg.inv, args(well_conditioned(3, kind="transposed")),
        transforms=("jvp",),
        notes="Enzyme's forward mode asserted 'found != gutils->invertedPointers' until pyjlad retried with blocks in "
              "reverse post-order (pyjlad/block_order.py)")
program(FAMILY, "inv_sum/2d", inv_sum, lambda a: jnp.sum(jnp.linalg.inv(a) ** 2), args(A3), transforms=SMOOTH)
program(FAMILY, "inv_product/2d", inv_product, lambda b, c: jnp.linalg.inv(b @ c), args(A3, A3), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "det/2d", det, jnp.linalg.det, args(A3), transforms=SMOOTH)
program(FAMILY, "det/2d-F", det, jnp.linalg.det, args(well_conditioned(4, kind="F")))
program(FAMILY, "det/2d-f32", det, jnp.linalg.det, args(well_conditioned(3, dtype=np.float32)), **F32)
program(FAMILY, "det_product/2d", det_product, lambda b, c: jnp.linalg.det(b @ c), args(A3, A3), wrt=(0, 1))
program(FAMILY, "log_det/2d", log_det, lambda a: jnp.log(jnp.linalg.det(a)), args(spd(3)))
program(FAMILY, "slogdet/2d", slogdet, _slogdet, args(A3))
program(FAMILY, "norm_vec/1d", norm_vec, jnp.linalg.norm, args(normal(5)), transforms=SMOOTH)
program(FAMILY, "norm_vec/1d-f32", norm_vec, jnp.linalg.norm, args(normal(5, dtype=np.float32)), **F32)
program(FAMILY, "norm_vec_1/1d", norm_vec_1, lambda x: jnp.linalg.norm(x, 1), args(normal(5, thresholds=(0.0,))))
program(FAMILY, "norm_vec_inf/1d", norm_vec_inf, lambda x: jnp.linalg.norm(x, jnp.inf), args(normal(5, gap=0.1)))
program(FAMILY, "norm_mat_fro/2d", norm_mat_fro, jnp.linalg.norm, args(normal(3, 4)))
program(FAMILY, "norm_mat_fro/2d-strided", norm_mat_fro, jnp.linalg.norm, args(normal(3, 4, kind="strided")))
_NORM_ORD = {"notes": "np.linalg.norm(a, 1 / np.inf) of a matrix: Numba compiles every order's branch, the SVD "
                      "of ord=2 included, with ord a run-time value; agrees since pyjlad prunes the branches "
                      "constants decide when Enzyme finds no derivative for a call (2026-11-24, second session)"}
program(FAMILY, "norm_mat_1/2d", norm_mat_1, _norm_mat_1, args(normal(3, 3, thresholds=(0.0,), gap=0.3)),
        **_NORM_ORD)
program(FAMILY, "norm_mat_inf/2d", norm_mat_inf, _norm_mat_inf, args(normal(3, 3, thresholds=(0.0,), gap=0.3)),
        **_NORM_ORD)
program(FAMILY, "cholesky/2d", cholesky, _cholesky, args(spd(3)), transforms=ARRAY)
program(FAMILY, "cholesky/2d-F", cholesky, _cholesky, args(spd(3, kind="F")), transforms=ARRAY)
program(FAMILY, "cholesky_logdet/2d", cholesky_logdet,
        lambda a: 2.0 * jnp.sum(jnp.log(jnp.diag(_cholesky(a)))), args(spd(4)))
program(FAMILY, "matrix_power/2d", matrix_power, lambda a: jnp.linalg.matrix_power(a, 3), args(normal(3, 3)),
        transforms=ARRAY, expect="refused",
        notes="a pyjlad defect: Numba types np.linalg.matrix_power's result as Optional(array), and pyjlad's "
              "generated output wrapper (np.ascontiguousarray(r)) does not compile for it: UnsupportedFunctionError "
              "'Numba cannot compile matrix_power_outputs' although Numba compiles the function")
program(FAMILY, "least_squares_normal/2d", least_squares_normal, lambda a, b: jnp.linalg.solve(a.T @ a, a.T @ b),
        args(normal(5, 3), normal(5)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "gaussian_nll/2d", gaussian_nll, _gaussian_nll, args(normal(3, 3), normal(3)), wrt=(0, 1))
# The matrix held constant, the vector differentiated: the products of the matrix alone carry a tangent
# (forward mode read it unset: NaN on a heap of NaN; Hessians were refused, "No augmented forward pass
# found for cblas_dlascl").
program(FAMILY, "least_squares_normal/2d-wrt-b", least_squares_normal,
        lambda a, b: jnp.linalg.solve(a.T @ a, a.T @ b), args(normal(5, 3), normal(5)), wrt=(1,), transforms=ARRAY)
program(FAMILY, "gram_solve/2d-wrt-b", gram_solve, lambda a, b: jnp.linalg.solve(a.T @ a, b),
        args(normal(5, 3), normal(3)), wrt=(1,), transforms=ARRAY)
program(FAMILY, "gram_quad_form/2d-wrt-x", gram_quad_form, lambda a, x: x @ (a @ a.T) @ x,
        args(normal(3, 4), normal(3)), wrt=(1,), transforms=("gradient", "jvp", "hvp"))
program(FAMILY, "gaussian_nll/2d-wrt-x", gaussian_nll, _gaussian_nll, args(normal(3, 3), normal(3)), wrt=(1,),
        transforms=("gradient", "jvp", "hvp"))
program(FAMILY, "eigvalsh_sum/2d", eigvalsh_sum, lambda a: jnp.sum(jnp.linalg.eigvalsh(a) ** 2), args(spd(3)),
        **_lapack("np.linalg.eigvalsh"))
program(FAMILY, "svd_values/2d", svd_values, lambda a: jnp.sum(jnp.linalg.svd(a)[1]), args(normal(3, 2)),
        **_lapack("np.linalg.svd"))
program(FAMILY, "lstsq/2d", lstsq, lambda a, b: jnp.linalg.lstsq(a, b)[0], args(normal(4, 2), normal(4)),
        transforms=ARRAY, **_lapack("np.linalg.lstsq"))
program(FAMILY, "qr_r/2d", qr_r, lambda a: jnp.sum(jnp.linalg.qr(a)[1] ** 2), args(normal(3, 3)),
        **_lapack("np.linalg.qr"))
program(FAMILY, "pinv/2d", pinv, jnp.linalg.pinv, args(normal(3, 2)), transforms=ARRAY, **_lapack("np.linalg.pinv"))
