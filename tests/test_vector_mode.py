"""Enzyme's vector mode: Jacobians, Hessians and batched jvp/vjp, several directions per sweep (issue 20).

Oracles: JAX in float64 (``jacfwd``, ``jacrev``, ``hessian``, ``vmap`` of ``jvp``/``vjp``) on
``jax.numpy`` twins, evaluated on copies taken before the call; the caller's arrays are checked
unchanged. Chunk widths that do not divide the sizes, width 1 (one sweep per direction) and
the fallback where vector mode does not apply (BLAS calls) give the same results.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from numba import njit
from numba.core.errors import NumbaPerformanceWarning

import pyjlad
from pyjlad import vector_products, vector_sweeps
from pyjlad.chunk_threads import sweep_width
from pyjlad.errors import ArgumentError, ArgumentTypeError
from pyjlad.vector_products import (
    forward_directions,
    hessian_columns,
    jacobian_vector,
    reverse_directions,
    unit_chunks,
)

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(2020)
W = RNG.normal(size=(7, 5))
X = RNG.normal(size=5)
B = RNG.normal(size=7)
S = 0.8


@njit
def layer(w, x, b, s):
    n, m = w.shape
    y = np.empty_like(b)
    for i in range(n):
        acc = b[i]
        for j in range(m):
            acc += w[i, j] * x[j]
        y[i] = s * np.tanh(acc)
    return y


def layer_jax(w, x, b, s):
    return s * jnp.tanh(w @ x + b)


@njit
def scalar_fn(x, s):
    acc = 0.0
    for i in range(x.shape[0]):
        acc += np.sin(x[i]) * x[i] * s + s * s * x[i]
    return acc


def scalar_fn_jax(x, s):
    return jnp.sum(jnp.sin(x) * x * s + s * s * x)


@njit
def written(x, out):
    for i in range(out.shape[0]):
        out[i] = np.exp(x[i % x.shape[0]]) * x[(i + 1) % x.shape[0]]


def written_jax(x, n):
    idx = np.arange(n)
    return jnp.exp(x[idx % x.shape[0]]) * x[(idx + 1) % x.shape[0]]


@njit
def rosen(x, c):
    acc = 0.0
    for i in range(x.size - 1):
        a = x.flat[i + 1] - x.flat[i] ** 2
        acc += c[0] * a * a + (1.0 - x.flat[i]) ** 2 + np.cos(x.flat[i] * x.flat[i + 1])
    return acc


def rosen_jax(x, c):
    v = x.ravel()
    return jnp.sum(c[0] * (v[1:] - v[:-1] ** 2) ** 2 + (1.0 - v[:-1]) ** 2 + jnp.cos(v[:-1] * v[1:]))


@njit
def blas_fn(x, y):
    return np.tanh(x) * np.dot(x, y)


def blas_fn_jax(x, y):
    return jnp.tanh(x) * jnp.dot(x, y)


@njit
def temps(x, c):
    y = np.sin(x) * x + c[0] * x * x
    return np.sum(np.exp(-y) * y) + x[0] * x[-1]


def temps_jax(x, c):
    y = jnp.sin(x) * x + c[0] * x * x
    return jnp.sum(jnp.exp(-y) * y) + x[0] * x[-1]


@njit
def array_temps(x):
    return np.tanh(np.cumsum(x * x)) * x[::-1]


def array_temps_jax(x):
    return jnp.tanh(jnp.cumsum(x * x)) * x[::-1]


# A custom rule that differs from the function (f(x) = x^2, the rule claims 1.5 x^2): vector mode
# does not apply, and the one-direction fallback must use the rule (hand-derived oracle).
@pyjlad.custom_derivative
@njit
def ruled_square(x):
    return x * x


@ruled_square.defvjp
@njit
def _ruled_square_vjp(x, g):
    return 3.0 * x * g


@njit
def ruled_sum(x):
    acc = 0.0
    for i in range(x.shape[0]):
        acc += ruled_square(x[i]) + math.sin(x[i])
    return acc


def _copies(*arrays):
    return [np.array(a, copy=True) for a in arrays]


@pytest.mark.parametrize("mode", ["reverse", "forward"])
@pytest.mark.parametrize("chunk", [None, 3, 1, 16])
def test_jacobian_matches_jax_all_arguments(mode, chunk):
    w, x, b = _copies(W, X, B)
    got = pyjlad.jacobian(layer, w, x, b, S, wrt=(0, 1, 2, 3), mode=mode, chunk=chunk)
    want = jax.jacrev(layer_jax, argnums=(0, 1, 2, 3))(W, X, B, S)
    for g, j in zip(got, want):
        assert g.shape == np.shape(j)
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-13)
    for a, orig in zip((w, x, b), (W, X, B)):
        np.testing.assert_array_equal(a, orig)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_vector_mode_is_used(mode):
    args = (W.copy(), X.copy(), B.copy(), S)
    if mode == "forward":
        got = forward_directions(layer, args, (False, True, False, False), 5, unit_chunks(1, (5,), np.float64, 4),
                                 4, None)
        assert got is not None
        np.testing.assert_allclose(got[1].T, np.asarray(jax.jacfwd(layer_jax, argnums=1)(W, X, B, S)), rtol=1e-12)
    else:
        seeds = unit_chunks(0, (7,), np.float64, 1)
        got = reverse_directions(layer, args, (False, True, False, False), 7, lambda a, b, w: seeds(a, b, w)[0], 4,
                                 None)
        assert got is not None
        np.testing.assert_allclose(got[1][1], np.asarray(jax.jacrev(layer_jax, argnums=1)(W, X, B, S)), rtol=1e-12)
    assert hessian_columns(rosen, (RNG.normal(size=6), np.array([3.0])), 0, 4, None) is not None


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_scalar_output_and_scalar_argument(mode):
    x = X.copy()
    gx, gs = pyjlad.jacobian(scalar_fn, x, S, wrt=(0, 1), mode=mode, chunk=2)
    jx, js = jax.grad(scalar_fn_jax, argnums=(0, 1))(X, S)
    np.testing.assert_allclose(gx, np.asarray(jx), rtol=1e-12)
    np.testing.assert_allclose(gs, float(js), rtol=1e-12)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_function_writing_its_output(mode):
    x, out = X.copy(), np.zeros(9)
    got = pyjlad.jacobian(written, x, out, mode=mode, chunk=4)
    np.testing.assert_allclose(got, np.asarray(jax.jacfwd(written_jax)(X, 9)), rtol=1e-12)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(out, np.zeros(9))


def test_batched_products_of_a_function_writing_its_output():
    # A function returning nothing: the value is None, as from the unbatched jvp/vjp (0.0 before 2026-12-04).
    x, out = X.copy(), np.zeros(9)
    jac = np.asarray(jax.jacfwd(written_jax)(X, 9))
    tangents = RNG.normal(size=(3, X.shape[0]))
    value, pushed = pyjlad.jvp(written, (x, out), (tangents.copy(), None), batched=True, chunk=2)
    assert value is None
    np.testing.assert_allclose(pushed, tangents @ jac.T, rtol=1e-12)
    cotangents = RNG.normal(size=(3, 9))
    value, (pulled, _) = pyjlad.vjp(written, (x, out), cotangents.copy(), batched=True, chunk=2)
    assert value is None
    np.testing.assert_allclose(pulled, cotangents @ jac, rtol=1e-12)
    np.testing.assert_array_equal(x, X)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_float32(mode):
    w, x, b = (a.astype(np.float32) for a in (W, X, B))
    got = pyjlad.jacobian(layer, w, x, b, np.float32(S), wrt=1, mode=mode, chunk=4)
    assert got.dtype == np.float32
    want = jax.jacfwd(layer_jax, argnums=1)(W.astype(np.float32).astype(np.float64),
                                              X.astype(np.float32).astype(np.float64),
                                              B.astype(np.float32).astype(np.float64), float(np.float32(S)))
    np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("chunk", [None, 4, 1, 32])
@pytest.mark.parametrize("shape", [(11,), (3, 4)])
def test_hessian_matches_jax(chunk, shape):
    x0 = RNG.normal(size=shape)
    c0 = np.array([5.0])
    x, c = x0.copy(), c0.copy()
    got = pyjlad.hessian(rosen, x, c, chunk=chunk)
    np.testing.assert_allclose(got, np.asarray(jax.hessian(rosen_jax)(x0, c0)), rtol=1e-11, atol=1e-11)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(c, c0)


def test_functions_allocating_temporaries():
    x0, c0 = RNG.normal(size=13), np.array([0.3])
    assert hessian_columns(temps, (x0, c0), 0, 4, None) is not None
    np.testing.assert_allclose(pyjlad.hessian(temps, x0.copy(), c0, chunk=4),
                               np.asarray(jax.hessian(temps_jax)(x0, c0)), rtol=1e-11, atol=1e-12)
    for mode in ("forward", "reverse"):
        np.testing.assert_allclose(pyjlad.jacobian(array_temps, x0.copy(), mode=mode, chunk=4),
                                   np.asarray(jax.jacfwd(array_temps_jax)(x0)), rtol=1e-12, atol=1e-13)


def test_hessian_float32():
    x0 = RNG.normal(size=6).astype(np.float32)
    c0 = np.array([5.0], np.float32)
    got = pyjlad.hessian(rosen, x0.copy(), c0.copy(), chunk=4)
    assert got.dtype == np.float32
    want = jax.hessian(rosen_jax)(x0.astype(np.float64), c0.astype(np.float64))
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("chunk", [None, 2, 1])
def test_batched_jvp_matches_vmap(chunk):
    tx = RNG.normal(size=(5, 5))
    ts = RNG.normal(size=5)
    w, x, b = _copies(W, X, B)
    value, tangents = pyjlad.jvp(layer, (w, x, b, S), (None, tx.copy(), None, ts.copy()), batched=True, chunk=chunk)

    def one(t, u):
        return jax.jvp(lambda x_, s_: layer_jax(W, x_, B, s_), (X, S), (t, u))[1]

    np.testing.assert_allclose(value, np.asarray(layer_jax(W, X, B, S)), rtol=1e-13)
    np.testing.assert_allclose(tangents, np.asarray(jax.vmap(one)(tx, ts)), rtol=1e-12, atol=1e-13)
    for a, orig in zip((w, x, b), (W, X, B)):
        np.testing.assert_array_equal(a, orig)
    value, tangents = pyjlad.jvp(scalar_fn, (x, S), (tx[:3], None), batched=True, chunk=chunk)
    want = jax.vmap(lambda t: jax.jvp(lambda x_: scalar_fn_jax(x_, S), (X,), (t,))[1])(tx[:3])
    np.testing.assert_allclose(tangents, np.asarray(want), rtol=1e-12)
    assert value == pytest.approx(float(scalar_fn_jax(X, S)), rel=1e-13)


@pytest.mark.parametrize("chunk", [None, 3, 1])
def test_batched_vjp_matches_vmap(chunk):
    cot = RNG.normal(size=(4, 7))
    w, x, b = _copies(W, X, B)
    value, cots = pyjlad.vjp(layer, (w, x, b, S), cot.copy(), batched=True, chunk=chunk)
    _, pullback = jax.vjp(layer_jax, W, X, B, S)
    want = jax.vmap(pullback)(cot)
    np.testing.assert_allclose(value, np.asarray(layer_jax(W, X, B, S)), rtol=1e-13)
    for g, j in zip(cots, want):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-13)
    for a, orig in zip((w, x, b), (W, X, B)):
        np.testing.assert_array_equal(a, orig)
    _, (gx, gs) = pyjlad.vjp(scalar_fn, (x, S), np.array([1.0, -2.0, 0.5]), batched=True, chunk=chunk)
    jx, js = jax.grad(scalar_fn_jax, argnums=(0, 1))(X, S)
    np.testing.assert_allclose(gx, np.outer([1.0, -2.0, 0.5], np.asarray(jx)), rtol=1e-12)
    np.testing.assert_allclose(gs, np.array([1.0, -2.0, 0.5]) * float(js), rtol=1e-12)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_fallback_for_blas_calls(mode):
    x, y = X.copy(), RNG.normal(size=5)
    y0 = y.copy()
    assert forward_directions(blas_fn, (x, y), (True, False), 5, unit_chunks(0, (5,), np.float64, 2), 4,
                              None) is None
    got = pyjlad.jacobian(blas_fn, x, y, wrt=(0, 1), mode=mode, chunk=4)
    want = jax.jacfwd(blas_fn_jax, argnums=(0, 1))(X, y0)
    for g, j in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-13)
    value, tangents = pyjlad.jvp(blas_fn, (x, y), (np.eye(5)[:2], None), batched=True)
    np.testing.assert_allclose(tangents, np.asarray(want[0])[:, :2].T, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(y, y0)


def test_fallback_for_custom_rules():
    x = RNG.normal(size=6)
    x0 = x.copy()
    assert jacobian_vector(ruled_sum, (x,), (0,), "reverse", 4, None) is None
    np.testing.assert_allclose(pyjlad.jacobian(ruled_sum, x, chunk=4), 3.0 * x0 + np.cos(x0), rtol=1e-13)
    np.testing.assert_allclose(pyjlad.hessian(ruled_sum, x, chunk=4), np.diag(3.0 - np.sin(x0)), rtol=1e-12,
                               atol=1e-14)
    np.testing.assert_array_equal(x, x0)


@njit
def pooled(x, width):
    out = np.empty(x.shape[0] // width)
    for i in range(out.shape[0]):
        out[i] = np.sin(x[i * width]) * width
        for k in range(1, width):
            out[i] += x[i * width + k] ** 2
    return out


def pooled_jax(x, width):
    v = x.reshape(-1, width)
    return jnp.sin(v[:, 0]) * width + jnp.sum(v[:, 1:] ** 2, axis=1)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_integer_argument(mode):
    x = RNG.normal(size=12)
    x0 = x.copy()
    got = pyjlad.jacobian(pooled, x, 3, mode=mode, chunk=4)
    np.testing.assert_allclose(got, np.asarray(jax.jacfwd(pooled_jax)(x0, 3)), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, x0)


def test_bad_input_is_refused_clearly():
    with pytest.raises(ArgumentTypeError, match="chunk"):
        pyjlad.jacobian(layer, W, X, B, S, chunk=0)
    with pytest.raises(ArgumentTypeError, match="chunk"):
        pyjlad.hessian(rosen, X, np.ones(1), chunk=2.5)
    with pytest.raises(ArgumentError, match="shape"):
        pyjlad.jvp(layer, (W, X, B, S), (None, np.ones(5), None, None), batched=True)
    with pytest.raises(ArgumentError, match="leading"):
        pyjlad.jvp(layer, (W, X, B, S), (None, np.ones((2, 5)), None, np.ones(3)), batched=True)
    with pytest.raises(ArgumentError, match="shape"):
        pyjlad.vjp(layer, (W, X, B, S), np.ones((2, 6)), batched=True)


@njit
def scratch_layer(x, scratch):  # returns an array and writes its second argument
    for i in range(x.size):
        scratch[i] = 2.0 * x[i]
    return np.tanh(scratch) * x


def scratch_layer_jax(x):
    return jnp.tanh(2.0 * x) * x


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_array_result_and_written_argument_repeated_calls(mode):
    # Vector mode shadows the written scratch array (else its derivatives are lost); the second and
    # third calls reuse the cached plan (which arguments f writes): the caller's
    # arrays must still be left alone, and every chunk's result must be right.
    want = np.asarray(jax.jacfwd(scratch_layer_jax)(X))
    for _ in range(3):
        x, scratch = X.copy(), np.full(X.shape, 7.0)
        got = pyjlad.jacobian(scratch_layer, x, scratch, mode=mode, chunk=4)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        np.testing.assert_array_equal(x, X)
        np.testing.assert_array_equal(scratch, np.full(X.shape, 7.0))


@njit
def positive_squares(x, repeat):
    kept = x[x > 0.0]  # the result's length depends on the values
    out = np.empty(kept.size * repeat)
    for r in range(repeat):
        out[r * kept.size:(r + 1) * kept.size] = kept * kept
    return out


def positive_squares_jax(x, mask, repeat):
    return jnp.tile(x[mask] ** 2, repeat)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_result_whose_length_changes_between_calls_of_the_same_shapes_is_measured_again(mode):
    # The output size is remembered from the last call with the same argument shapes; a call whose
    # result has another size must notice before anything is written, not write out of bounds.
    calls = [(np.array([1.0, -2.0, 3.0, 0.5]), 2), (np.array([1.0, 2.0, 3.0, 0.5]), 2),
             (np.array([-1.0, -2.0, 3.0, -0.5]), 2), (np.array([-1.0, -2.0, 3.0, -0.5]), 3),
             (np.array([1.0, 2.0, 3.0, 0.5]), 2)]
    for x, repeat in calls:
        before = x.copy()
        mask = before > 0.0
        want = np.asarray(jax.jacfwd(lambda v, m=mask, r=repeat: positive_squares_jax(v, m, r))(before))
        got = pyjlad.jacobian(positive_squares, x, repeat, mode=mode, chunk=3)
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
        np.testing.assert_array_equal(x, before)


@njit
def squares_or_more(x, flag):
    if flag:
        return np.concatenate((np.sin(x), np.array([np.sum(x * x)])))
    return np.cos(x) * x


def squares_or_more_jax(x, flag):
    return jnp.concatenate((jnp.sin(x), jnp.array([jnp.sum(x * x)]))) if flag else jnp.cos(x) * x


def test_batched_vjp_measures_an_output_whose_size_a_flag_or_the_values_changed():
    """The plan's output size is remembered by the arrays' shapes and the integers; a bool or the values may change
    it. Until 2026-12-06 a batched vjp then refused right cotangents ("the output has (5,)"); now it measures the
    output again, and still refuses cotangents of the wrong shape, naming the output's measured shape."""
    x = np.array([0.3, -1.2, 0.8, 0.5, -0.7])
    rng = np.random.default_rng(3)
    for flag, size in [(False, 5), (True, 6), (False, 5)]:
        cotangents = rng.normal(size=(3, size))
        _, pullback = jax.vjp(lambda v, f=flag: squares_or_more_jax(v, f), jnp.asarray(x))
        want = np.stack([np.asarray(pullback(jnp.asarray(c))[0]) for c in cotangents])
        _, (got, flag_cotangent) = pyjlad.vjp(squares_or_more, (x, flag), cotangents, batched=True)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        assert flag_cotangent is None
    with pytest.raises(ArgumentError, match=r"the cotangents have shape \(7,\); the output has \(6,\)"):
        pyjlad.vjp(squares_or_more, (x, True), np.ones((2, 7)), batched=True)
    for sign, size in [(1.0, 3), (-1.0, 2)]:  # the values decide the size
        v = sign * x
        mask = v > 0.0
        cotangents = rng.normal(size=(2, size))
        _, pullback = jax.vjp(lambda u, m=mask: jnp.sin(u[m]), jnp.asarray(v))
        want = np.stack([np.asarray(pullback(jnp.asarray(c))[0]) for c in cotangents])
        _, (got,) = pyjlad.vjp(positive_sines, (v,), cotangents, batched=True)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


@njit
def positive_sines(x):
    return np.sin(x[x > 0.0])


def test_sweep_width_is_what_the_directions_need_at_most_the_chunk():
    # Hand-derived: the directions per thread, rounded up to a power of two (at least 2), capped by the chunk.
    assert [sweep_width(32, n) for n in (1, 2, 3, 5, 16, 17, 33, 500)] == [2, 2, 4, 8, 16, 32, 32, 32]
    assert [sweep_width(5, n) for n in (3, 4, 5, 90)] == [4, 4, 5, 5]
    assert sweep_width(1, 50) == 1 and sweep_width(3, 3) == 3
    assert [sweep_width(32, 20, t) for t in (1, 2, 3, 4)] == [32, 16, 8, 8]
    assert sweep_width(32, 64, 2) == 32 and sweep_width(8, 90, 4) == 8


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_few_directions_sweep_no_wider_than_they_need(monkeypatch, mode):
    # A Jacobian with respect to 5 inputs (forward) or of 7 outputs (reverse) with the default chunk of 32:
    # sweeps of 8 directions, not 32 of which 25 (24) would be zero. Seen by the widths the sweeps are prepared for.
    widths = []
    real = vector_sweeps._prepared

    def spy(plan, primals, sweep_mode, active, width, *rest):
        widths.append(width)
        return real(plan, primals, sweep_mode, active, width, *rest)

    monkeypatch.setattr(vector_sweeps, "_prepared", spy)
    w, x, b = _copies(W, X, B)
    got = pyjlad.jacobian(layer, w, x, b, S, wrt=1, mode=mode)
    np.testing.assert_allclose(got, np.asarray(jax.jacrev(layer_jax, argnums=1)(W, X, B, S)), rtol=1e-12)
    assert widths and set(widths) == {8}
    for a, orig in zip((w, x, b), (W, X, B)):
        np.testing.assert_array_equal(a, orig)


def test_a_small_hessian_sweeps_no_wider_than_its_columns(monkeypatch):
    widths = []
    real = vector_products.sweeper

    def spy(f, engine, kind, mode, fixed, wrt, width, *rest):
        widths.append(width)
        return real(f, engine, kind, mode, fixed, wrt, width, *rest)

    monkeypatch.setattr(vector_products, "sweeper", spy)
    x0, c0 = RNG.normal(size=3), np.array([2.0])
    x, c = x0.copy(), c0.copy()
    got = pyjlad.hessian(rosen, x, c)
    np.testing.assert_allclose(got, np.asarray(jax.hessian(rosen_jax)(x0, c0)), rtol=1e-11, atol=1e-11)
    assert widths and set(widths) == {4}
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(c, c0)


def test_jacobian_and_hessian_of_contiguous_arrays_warn_of_no_layout(monkeypatch) -> None:
    # The interleaved sweeps compile f for strided views of pyjlad's own buffers; Numba warned "'@' is faster on
    # contiguous arrays" although every array the caller passed was contiguous (a user-style probe, 2026-12-04).
    # Built afresh (a derivative from the disk cache compiles nothing, and warns of nothing either way).
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")
    @njit
    def layer_energy(x, a):
        return np.sum(np.tanh(a @ x) ** 2)

    @njit
    def layer_out(x, a):
        return np.tanh(a @ x)

    x, a = RNG.normal(size=4), RNG.normal(size=(4, 4))
    x0, a0 = x.copy(), a.copy()
    with warnings.catch_warnings(record=True) as caught:  # (not "error": the sweep would fall back to stacked)
        warnings.simplefilter("always", NumbaPerformanceWarning)
        jac = pyjlad.jacobian(layer_out, x, a)
        hess = pyjlad.hessian(layer_energy, x, a)
    assert not [str(w.message) for w in caught if issubclass(w.category, NumbaPerformanceWarning)]
    z = np.tanh(a0 @ x0)
    np.testing.assert_allclose(jac, (1 - z ** 2)[:, None] * a0, rtol=1e-12)
    want = np.asarray(jax.hessian(lambda v: jnp.sum(jnp.tanh(jnp.asarray(a0) @ v) ** 2))(jnp.asarray(x0)))
    np.testing.assert_allclose(hess, want, rtol=1e-10, atol=1e-13)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(a, a0)
