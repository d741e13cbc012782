"""np.dot / @ through BLAS, Numba's helpers, prange, against hand-derived gradients."""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit, prange

import pyjlad

rng = np.random.default_rng(11)


def test_seed001_verbatim() -> None:
    """Seed 001: np.dot with a vector captured from the enclosing function; the gradient is y."""

    def outerfunc():
        y = rng.normal(size=2)

        @njit(error_model="numpy")
        def func(x):
            return np.dot(x, y)

        return func, y

    func, y = outerfunc()
    x = rng.normal(size=2)
    np.testing.assert_array_equal(pyjlad.gradient(func, x), y)


@njit
def vv(x, y):
    return np.dot(x, y) ** 2


@njit
def mv(a, x):
    return np.sum(np.sin(a @ x))


@njit
def mm(a, b):
    return np.sum((a @ b) ** 2)


@njit
def mm_dot(a, b):
    return np.sum(np.dot(a, b) * 0.5)


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-12), (np.float32, 1e-5)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_products(dtype, rtol, order) -> None:
    x, y = rng.normal(size=6).astype(dtype), rng.normal(size=6).astype(dtype)
    gx, gy = pyjlad.gradient(vv, x, y, wrt=(0, 1))
    d = np.dot(x, y)
    np.testing.assert_allclose(gx, 2 * d * y, rtol=rtol)
    np.testing.assert_allclose(gy, 2 * d * x, rtol=rtol)

    a = np.asarray(rng.normal(size=(4, 6)), dtype=dtype, order=order)
    ga, gx = pyjlad.gradient(mv, a, x, wrt=(0, 1))
    c = np.cos(a.astype(np.float64) @ x)
    np.testing.assert_allclose(ga, np.outer(c, x), rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gx, a.T @ c, rtol=rtol, atol=rtol)

    b = np.asarray(rng.normal(size=(6, 3)), dtype=dtype, order=order)
    ga, gb = pyjlad.gradient(mm, a, b, wrt=(0, 1))
    prod = a.astype(np.float64) @ b
    np.testing.assert_allclose(ga, 2 * prod @ b.T, rtol=rtol, atol=rtol)
    np.testing.assert_allclose(gb, a.T @ (2 * prod), rtol=rtol, atol=rtol)
    assert ga.dtype == dtype and ga.flags.f_contiguous == (order == "F")

    ga, gb = pyjlad.gradient(mm_dot, a, b, wrt=(0, 1))
    np.testing.assert_allclose(ga, 0.5 * np.ones((4, 3)) @ b.T, rtol=rtol, atol=rtol)


def test_outer_trace_diag() -> None:
    a, b = rng.normal(size=3), rng.normal(size=4)
    ga, gb = pyjlad.gradient(njit(lambda a, b: np.sum(np.outer(a, b) ** 2)), a, b, wrt=(0, 1))
    np.testing.assert_allclose(ga, 2 * a * np.sum(b ** 2), rtol=1e-12)
    np.testing.assert_allclose(gb, 2 * b * np.sum(a ** 2), rtol=1e-12)
    m = rng.normal(size=(4, 4))
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda m: np.trace(m @ m)), m), 2 * m.T, rtol=1e-12)
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda m: np.sum(np.diag(m) ** 3)), m),
                               np.diag(3 * np.diag(m) ** 2), rtol=1e-12)


@njit
def mlp_loss(x, w1, w2, y):
    h = np.tanh(x @ w1)
    r = h @ w2 - y
    return np.sum(r * r)


def test_mlp_loss_both_weight_matrices() -> None:
    x, y = rng.normal(size=(16, 5)), rng.normal(size=(16, 2))
    w1, w2 = rng.normal(size=(5, 8)), rng.normal(size=(8, 2))
    g1, g2 = pyjlad.gradient(mlp_loss, x, w1, w2, y, wrt=(1, 2))
    h = np.tanh(x @ w1)
    r = 2 * (h @ w2 - y)
    np.testing.assert_allclose(g2, h.T @ r, rtol=1e-12)
    np.testing.assert_allclose(g1, x.T @ ((r @ w2.T) * (1 - h ** 2)), rtol=1e-12)


@njit(parallel=True)
def parallel_energy(x, k):
    s = 0.0
    for i in prange(x.shape[0]):
        s += k * np.sin(x[i]) ** 2
    return s


def test_parallel_function_differentiates_its_serial_version() -> None:
    x = rng.normal(size=50)
    gx, gk = pyjlad.gradient(parallel_energy, x, 1.5, wrt=(0, 1))
    np.testing.assert_allclose(gx, 1.5 * 2 * np.sin(x) * np.cos(x), rtol=1e-12)
    assert gk == pytest.approx(float(np.sum(np.sin(x) ** 2)), rel=1e-12)


def _fd(f, args, index, h=1e-6):
    x = args[index]
    g = np.zeros_like(x)
    for idx in np.ndindex(x.shape):
        plus = [a.copy() for a in args]
        minus = [a.copy() for a in args]
        plus[index][idx] += h
        minus[index][idx] -= h
        g[idx] = (f(*plus) - f(*minus)) / (2 * h)
    return g


def test_inv_det_cholesky() -> None:
    a = rng.normal(size=(4, 4)) + 4 * np.eye(4)
    ai = np.linalg.inv(a)
    ones = np.ones((4, 4))
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda a: np.sum(np.linalg.inv(a))), a),
                               -(ai.T @ ones @ ai.T), rtol=1e-10, atol=1e-14)
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda a: np.linalg.det(a)), a),
                               np.linalg.det(a) * ai.T, rtol=1e-10)
    spd = a @ a.T
    weights = np.arange(16.0).reshape(4, 4)
    chol = njit(lambda s: np.sum(np.linalg.cholesky(s) * weights))
    np.testing.assert_allclose(pyjlad.gradient(chol, spd), _fd(chol, (spd,), 0), rtol=1e-6, atol=1e-8)


@njit(parallel=True)
def remote_stats(MSE, varX_matrix_global, avg_beta_vector):
    """Seed 003's Coinstac kernel, verbatim."""
    my_shape = avg_beta_vector.shape
    ts = np.zeros(my_shape)
    for voxel in prange(my_shape[0]):
        var_covar_beta_global = MSE[voxel] * np.linalg.inv(varX_matrix_global)
        se_beta_global = np.sqrt(np.diag(var_covar_beta_global))
        ts[voxel, :] = avg_beta_vector[voxel, :] / se_beta_global
    return ts


@njit(parallel=True)
def coinstac_loss(mse, v, b):
    return np.sum(remote_stats(mse, v, b) ** 2)


def test_coinstac_remote_stats_every_float_argument() -> None:
    mse = rng.uniform(0.5, 1.5, 5)
    x = rng.normal(size=(10, 3))
    v = x.T @ x
    b = rng.normal(size=(5, 3))
    grads = pyjlad.gradient(coinstac_loss, mse, v, b, wrt=(0, 1, 2))
    for index, g in enumerate(grads):
        fd = _fd(coinstac_loss, (mse, v, b), index)
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-6 * np.abs(fd).max())


@njit
def solve_loss(a, b):
    return np.sum(np.linalg.solve(a, b) ** 2)


@njit
def solve_values(a, b):
    return np.linalg.solve(a, b)


def _solve_problem(dtype, b_shape):
    a = (rng.normal(size=(4, 4)) + 4 * np.eye(4)).astype(dtype)
    b = rng.normal(size=b_shape).astype(dtype)
    # d/db sum(x^2) = 2 A^-T x and d/dA = -(2 A^-T x) x^T, x = A^-1 b (columnwise for several b)
    x = np.linalg.solve(a.astype(np.float64), b.astype(np.float64))
    gb = np.linalg.solve(a.T.astype(np.float64), 2 * x)
    ga = -(gb.reshape(4, -1) @ x.reshape(4, -1).T)
    return a, b, ga, gb


@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-10), (np.float32, 1e-4)])
@pytest.mark.parametrize("b_shape", [(4,), (4, 3)], ids=["vector", "matrix"])
def test_solve_gradient(dtype, rtol, b_shape) -> None:
    """Seed 003's solve; a vector b used to fail Enzyme's type analysis (a shared stack slot)."""
    a, b, ga_ref, gb_ref = _solve_problem(dtype, b_shape)
    a0, b0 = a.copy(), b.copy()
    ga, gb = pyjlad.gradient(solve_loss, a, b, wrt=(0, 1))
    assert ga.dtype == dtype and gb.dtype == dtype
    np.testing.assert_allclose(ga, ga_ref, rtol=rtol, atol=rtol * np.abs(ga_ref).max())
    np.testing.assert_allclose(gb, gb_ref, rtol=rtol, atol=rtol * np.abs(gb_ref).max())
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)
    if dtype == np.float64:
        np.testing.assert_allclose(gb, _fd(solve_loss, (a, b), 1), rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(pyjlad.gradient(solve_loss, a, b, wrt=1), gb_ref, rtol=rtol)


@pytest.mark.parametrize("b_shape", [(4,), (4, 3)], ids=["vector", "matrix"])
def test_solve_forward_mode(b_shape) -> None:
    a, b, ga, gb = _solve_problem(np.float64, b_shape)
    a0, b0 = a.copy(), b.copy()
    # Hand-derived, X = A^-1 B: d X / d B = A^-1 per right-hand side, and dX = -A^-1 dA X, so
    # d X[i, j] / d A[k, l] = -A^-1[i, k] X[l, j].
    a_inv, x = np.linalg.inv(a0), np.linalg.solve(a0, b0)
    db_expected = a_inv if b.ndim == 1 else np.einsum("ik,jl->ijkl", a_inv, np.eye(3))
    da_expected = -np.einsum("ik,l...->i...kl", a_inv, x)
    ta, tb = rng.normal(size=a.shape), rng.normal(size=b.shape)
    value, tangent = pyjlad.jvp(solve_loss, (a, b), (ta, tb))
    assert value == pytest.approx(float(np.sum(np.linalg.solve(a, b) ** 2)), rel=1e-12)
    assert tangent == pytest.approx(float(np.sum(ga * ta) + np.sum(gb * tb)), rel=1e-10)
    for mode in ("forward", "reverse"):
        jb = pyjlad.jacobian(solve_values, a, b, wrt=1, mode=mode)
        np.testing.assert_allclose(jb, db_expected, rtol=1e-10, atol=1e-14, err_msg=mode)
    if b.ndim == 2:
        ja = pyjlad.jacobian(solve_values, a, b, wrt=0, mode="forward")
        np.testing.assert_allclose(ja, da_expected, rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_solve_vector_b_held_constant() -> None:
    # A constant vector b reaches the solver through a phi with Numba's overlap-safe copy
    # (pyjlad.aliasing): without a shadow of its own, reverse mode added adjoints into b.
    a, b, ga, _ = _solve_problem(np.float64, (4,))
    b0 = b.copy()
    np.testing.assert_allclose(pyjlad.gradient(solve_loss, a, b, wrt=0), ga, rtol=1e-10)
    np.testing.assert_array_equal(b, b0)
    ta = rng.normal(size=a.shape)
    assert pyjlad.jvp(solve_loss, (a, b0), (ta, None))[1] == pytest.approx(float(np.sum(ga * ta)), rel=1e-10)


def test_norm_of_vectors_and_matrices() -> None:
    x = rng.normal(size=5)
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda x: np.linalg.norm(x)), x), x / np.linalg.norm(x),
                               rtol=1e-12)
    a = rng.normal(size=(3, 4))
    np.testing.assert_allclose(pyjlad.gradient(njit(lambda a: np.linalg.norm(a)), a), a / np.linalg.norm(a),
                               rtol=1e-12)


@njit
def _norm_1(a):
    return np.linalg.norm(a, 1)


@njit
def _norm_inf(a):
    return np.linalg.norm(a, np.inf)


@njit
def _norm_neg_1(a):
    return np.linalg.norm(a, -1)


@njit
def _norm_neg_inf(a):
    return np.linalg.norm(a, -np.inf)


@njit
def _spectral_or_frobenius(a, k):
    # A helper whose SVD branch the constant at its only call site makes dead.
    if k == 2:
        return np.linalg.svd(a)[1][0]
    return np.sqrt(np.sum(a * a))


@njit
def _frobenius_by_helper(a):
    return _spectral_or_frobenius(a, 1) ** 2


@pytest.mark.parametrize("func,axis,pick", [
    (_norm_1, 0, np.argmax), (_norm_inf, 1, np.argmax), (_norm_neg_1, 0, np.argmin), (_norm_neg_inf, 1, np.argmin),
])
@pytest.mark.parametrize("dtype,rtol", [(np.float64, 1e-13), (np.float32, 1e-6)])
def test_matrix_norms_of_order_one_and_inf(func, axis, pick, dtype, rtol) -> None:
    """np.linalg.norm(a, 1 / inf / -1 / -inf): Numba compiles every order's branch, the SVD of
    ord=2 included, with ord a run-time value; the gradient is the signs of the chosen column
    (ord +-1) or row (ord +-inf), by hand. The SVD call sits on a branch the constant order makes
    dead, which pyjlad prunes before Enzyme when Enzyme finds no derivative for it."""
    a = np.asarray(rng.normal(size=(4, 3)), dtype=dtype)
    before = a.copy()
    sums = np.sum(np.abs(before.astype(np.float64)), axis=axis)
    k = pick(sums)
    expected = np.zeros_like(before, dtype=np.float64)
    if axis == 0:
        expected[:, k] = np.sign(before[:, k])
    else:
        expected[k, :] = np.sign(before[k, :])
    value, grad = pyjlad.value_and_gradient(func, a)
    np.testing.assert_allclose(value, sums[k], rtol=rtol)
    np.testing.assert_allclose(grad, expected, rtol=rtol)
    assert grad.dtype == dtype
    np.testing.assert_array_equal(a, before)
    tangent = rng.normal(size=a.shape).astype(dtype)
    _, jvp = pyjlad.jvp(func, (a,), (tangent,))
    np.testing.assert_allclose(jvp, np.sum(expected * tangent), rtol=10 * rtol)


def test_svd_on_a_branch_a_constant_makes_dead() -> None:
    a = rng.normal(size=(3, 3))
    before = a.copy()
    np.testing.assert_allclose(pyjlad.gradient(_frobenius_by_helper, a), 2 * before, rtol=1e-13)
    np.testing.assert_array_equal(a, before)


@njit
def _spectral_norm(a):
    return np.linalg.norm(a, 2)


def test_svd_that_runs_is_still_refused_clearly() -> None:
    """ord=2 needs the SVD's derivative, which pyjlad does not have: a refusal naming it, not a
    wrong gradient."""
    with pytest.raises(pyjlad.EnzymeError) as info:
        pyjlad.gradient(_spectral_norm, rng.normal(size=(3, 3)))
    message = str(info.value)
    # In the user's terms: the SVD, the line calling np.linalg.norm, a known limit (not Numba's helper names).
    assert message.startswith("pyjlad cannot differentiate _spectral_norm: it uses np.linalg.svd")
    assert "return np.linalg.norm(a, 2)" in message and "known limit" in message
    assert "singular_values" not in message and "not a matrix's 2-norm" in message
    assert "gesdd" in info.value.diagnostics


def test_retry_order_after_a_missing_derivative() -> None:
    from pyjlad.engines.differentiate import (
        _KEEP_EXTERNAL,
        _PRUNE_CONSTANT_BRANCHES,
        PASSES,
        SCALARIZED_PASSES,
        _next_attempt,
    )

    missing = "Enzyme: No augmented forward pass found for numba_ez_gesdd"
    pruned = _next_attempt(PASSES, (), missing)
    assert pruned == (_PRUNE_CONSTANT_BRANCHES + PASSES, (_KEEP_EXTERNAL,))
    assert _next_attempt(*pruned, missing) is None  # pruned already: nothing else to try
    # A later type failure keeps the pruning.
    loose = _next_attempt(*pruned, "Cannot deduce type")
    assert loose == (pruned[0], (_KEEP_EXTERNAL, "-enzyme-loose-types"))
    assert _next_attempt(*loose, "Cannot deduce type") == (
        _PRUNE_CONSTANT_BRANCHES + SCALARIZED_PASSES, (_KEEP_EXTERNAL, "-enzyme-loose-types", "-scalarize-load-store"))
