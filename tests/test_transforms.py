"""jvp, vjp, jacobian (both modes), hessian, hvp: array, tuple and in-place functions."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad

rng = np.random.default_rng(7)


def fd_jacobian(f, args, index, h=1e-6):
    """Central finite-difference Jacobian, shape out.shape + arg.shape."""
    args = list(args)
    x = np.asarray(args[index], dtype=np.float64)
    out0 = np.asarray(f(*args))
    jac = np.zeros(out0.shape + x.shape)
    for idx in np.ndindex(x.shape):
        plus, minus = x.copy(), x.copy()
        plus[idx] += h
        minus[idx] -= h
        args[index] = plus if x.shape else float(plus)
        fp = np.asarray(f(*args))
        args[index] = minus if x.shape else float(minus)
        fm = np.asarray(f(*args))
        jac[(Ellipsis, *idx)] = (fp - fm) / (2 * h)
    return jac


# ----------------------------------------------------------- array results
@njit
def alloc_empty(x, y):
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = math.sin(x[i]) * y + x[i] ** 2
    return out


@njit
def alloc_zeros_2d(x):
    out = np.zeros((2, x.shape[0]))
    for i in range(x.shape[0]):
        out[0, i] = x[i] * x[i]
        out[1, i] = math.exp(x[i]) * x[(i + 1) % x.shape[0]]
    return out


@njit
def alloc_empty_like(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = math.tanh(x[i]) * 3.0
    return out


@njit
def array_expression(x, y):
    return np.exp(x) * y + np.sin(x * y)


@njit
def reductions(x):
    return np.sum(x * x) + np.mean(np.sin(x)) + np.prod(x[:3]) + np.max(x * 2.0)


@njit
def slicing_cumsum_reshape(x):
    a = np.cumsum(x[1:] * x[:-1])
    b = x.reshape((2, 3))
    return np.sum(a * a) + np.sum(b[0] * b[1]) + x[::2].sum()


@njit
def tuple_result(x, s):
    return np.sin(x) * s, np.sum(x ** 3), 7


ARRAY_CASES = [
    ("np.empty", alloc_empty, (rng.normal(size=5), 0.7),
     lambda x, y: (np.diag(np.cos(x) * y + 2 * x), np.sin(x))),
    ("np.zeros 2-D", alloc_zeros_2d, (rng.normal(size=4),), None),
    ("np.empty_like", alloc_empty_like, (rng.normal(size=6),),
     lambda x: (np.diag(3 * (1 - np.tanh(x) ** 2)),)),
    ("array expression", array_expression, (rng.normal(size=5), rng.normal(size=5)),
     lambda x, y: (np.diag(np.exp(x) * y + np.cos(x * y) * y), np.diag(np.exp(x) + np.cos(x * y) * x))),
]


@pytest.mark.parametrize("mode", ["reverse", "forward"])
@pytest.mark.parametrize("name,f,args,analytic", ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_array_valued_jacobians(name, f, args, analytic, mode) -> None:
    float_args = tuple(i for i, a in enumerate(args) if isinstance(a, np.ndarray) or isinstance(a, float))
    jacs = pyjlad.jacobian(f, *args, wrt=float_args, mode=mode)
    for index, jac in zip(float_args, jacs):
        np.testing.assert_allclose(jac, fd_jacobian(f, args, index), rtol=1e-6, atol=1e-7)
    if analytic is not None:
        for jac, expected in zip(jacs, analytic(*args)):
            np.testing.assert_allclose(jac, expected, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("name,f,args,analytic", ARRAY_CASES, ids=[c[0] for c in ARRAY_CASES])
def test_forward_and_reverse_jacobians_agree_to_rounding(name, f, args, analytic) -> None:
    rev = pyjlad.jacobian(f, *args, wrt=0, mode="reverse")
    fwd = pyjlad.jacobian(f, *args, wrt=0, mode="forward")
    np.testing.assert_allclose(rev, fwd, rtol=1e-14, atol=1e-15)


def test_reductions_slicing_cumsum_reshape_gradients() -> None:
    x = rng.uniform(0.5, 1.5, 6)
    g_rev = pyjlad.gradient(reductions, x)
    expected = 2 * x + np.cos(x) / x.size
    expected[:3] += np.prod(x[:3]) / x[:3]
    expected[np.argmax(x)] += 2.0
    np.testing.assert_allclose(g_rev, expected, rtol=1e-12)
    g = pyjlad.gradient(slicing_cumsum_reshape, x)
    np.testing.assert_allclose(g, fd_jacobian(slicing_cumsum_reshape, (x,), 0), rtol=1e-6)
    _, tangent = pyjlad.jvp(slicing_cumsum_reshape, (x,), (np.ones(6),))
    assert tangent == pytest.approx(float(np.sum(g)), rel=1e-12)


def test_tuple_results_jvp_and_vjp() -> None:
    x, s = rng.normal(size=4), 1.3
    value, tangent = pyjlad.jvp(tuple_result, (x, s), (np.ones(4), 0.5))
    np.testing.assert_allclose(value[0], np.sin(x) * s)
    assert value[2] == 7
    np.testing.assert_allclose(tangent[0], np.cos(x) * s + np.sin(x) * 0.5, rtol=1e-12)
    assert tangent[1] == pytest.approx(float(np.sum(3 * x ** 2)), rel=1e-12)
    assert tangent[2] is None
    ct = (np.arange(4.0), 2.0, None)
    value, (cx, cs) = pyjlad.vjp(tuple_result, (x, s), ct)
    np.testing.assert_allclose(cx, np.arange(4.0) * np.cos(x) * s + 2.0 * 3 * x ** 2, rtol=1e-12)
    assert cs == pytest.approx(float(np.sum(np.arange(4.0) * np.sin(x))), rel=1e-12)
    # None for a float entry not differentiated: a zero cotangent (before: "entry 0 has shape ()").
    x0 = x.copy()
    _, (cx, cs) = pyjlad.vjp(tuple_result, (x, s), (None, 2.0, None))
    np.testing.assert_allclose(cx, 2.0 * 3 * x0 ** 2, rtol=1e-12)
    assert cs == 0.0
    _, (cx, cs) = pyjlad.vjp(tuple_result, (x, s), (np.arange(4.0), None, None))
    np.testing.assert_allclose(cx, np.arange(4.0) * np.cos(x0) * s, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)


def test_vjp_of_scalar_function_scales_the_gradient() -> None:
    @njit
    def f(x, n, c):
        return c * np.sum(x ** 3) + n

    x = rng.normal(size=3)
    value, (gx, gn, gc) = pyjlad.vjp(f, (x, 4, 2.0), 0.5)
    assert value == pytest.approx(2.0 * np.sum(x ** 3) + 4)
    np.testing.assert_allclose(gx, 0.5 * 6 * x ** 2, rtol=1e-12)
    assert gn is None
    assert gc == pytest.approx(0.5 * float(np.sum(x ** 3)), rel=1e-12)
    value, tangent = pyjlad.jvp(f, (x, 4, 2.0), (np.ones(3), None, 1.0))
    assert tangent == pytest.approx(float(np.sum(6 * x ** 2) + np.sum(x ** 3)), rel=1e-12)


# -------------------------------------------------------- in-place functions
@njit
def write_into(out, x, k):
    for i in range(x.shape[0]):
        out[i] = k * x[i] ** 2 + math.sin(x[i])


@njit
def mutate_and_read_back(x):
    for i in range(x.shape[0]):
        x[i] = x[i] * x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * (i + 1.0)
    return s


def test_in_place_function_vjp_seeds_the_output_argument() -> None:
    x, out = rng.normal(size=5), np.zeros(5)
    ct = rng.normal(size=5)
    value, (c_out, c_x, c_k) = pyjlad.vjp(write_into, (out, x, 1.5), ct)
    assert value is None
    np.testing.assert_allclose(out, 1.5 * x ** 2 + np.sin(x))  # f ran
    np.testing.assert_allclose(c_x, ct * (3.0 * x + np.cos(x)), rtol=1e-12)
    assert c_k == pytest.approx(float(np.sum(ct * x ** 2)), rel=1e-12)
    np.testing.assert_array_equal(c_out, 0.0)  # the output's old values do not matter


def test_in_place_function_jvp_and_jacobians() -> None:
    x, out = rng.normal(size=4), np.zeros(4)
    value, tangent = pyjlad.jvp(write_into, (out, x, 2.0), (None, np.ones(4), None))
    assert value is None
    np.testing.assert_allclose(tangent, 4.0 * x + np.cos(x), rtol=1e-12)
    for mode in ("reverse", "forward"):
        jac = pyjlad.jacobian(write_into, np.zeros(4), x, 2.0, wrt=1, mode=mode)
        np.testing.assert_allclose(jac, np.diag(4.0 * x + np.cos(x)), rtol=1e-12)


def test_function_that_mutates_its_input_and_reads_it_back() -> None:
    x = rng.uniform(0.5, 1.0, 5)
    w = np.arange(1.0, 6.0)
    g = pyjlad.gradient(mutate_and_read_back, x.copy())
    np.testing.assert_allclose(g, 2 * x * w, rtol=1e-12)
    _, t = pyjlad.jvp(mutate_and_read_back, (x.copy(),), (np.ones(5),))
    assert t == pytest.approx(float(np.sum(2 * x * w)), rel=1e-12)


# ---------------------------------------------------------------- Hessians
@njit
def non_quadratic(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i]) * x[(i + 1) % x.shape[0]] ** 2 + math.sin(x[i]) ** 3
    return s


def non_quadratic_hessian(x):
    n = x.size
    h = np.zeros((n, n))
    for i in range(n):
        j = (i + 1) % n
        h[i, i] += math.exp(x[i]) * x[j] ** 2
        h[i, i] += 6 * math.sin(x[i]) * math.cos(x[i]) ** 2 - 3 * math.sin(x[i]) ** 3
        h[j, j] += 2 * math.exp(x[i])
        h[i, j] += 2 * math.exp(x[i]) * x[j]
        h[j, i] += 2 * math.exp(x[i]) * x[j]
    return h


def test_hessian_matches_analytic_to_1e12() -> None:
    x = rng.normal(size=5)
    np.testing.assert_allclose(pyjlad.hessian(non_quadratic, x), non_quadratic_hessian(x), rtol=1e-12, atol=1e-13)


def test_hvp_without_forming_the_hessian() -> None:
    x, v = rng.normal(size=5), rng.normal(size=5)
    np.testing.assert_allclose(pyjlad.hvp(non_quadratic, (x,), v), non_quadratic_hessian(x) @ v, rtol=1e-12, atol=1e-13)


def test_scalar_hessian_and_hvp() -> None:
    f = njit(lambda a, b: math.sin(a) * b ** 3)
    assert pyjlad.hessian(f, 0.4, 2.0, wrt=0) == pytest.approx(-math.sin(0.4) * 8.0, rel=1e-12)
    assert pyjlad.hessian(f, 0.4, 2.0, wrt=1) == pytest.approx(math.sin(0.4) * 12.0, rel=1e-12)
    assert pyjlad.hvp(f, (0.4, 2.0), 3.0, wrt=1) == pytest.approx(3.0 * math.sin(0.4) * 12.0, rel=1e-12)


def test_hessian_of_2d_argument_has_doubled_shape() -> None:
    a = rng.normal(size=(2, 3))
    h = pyjlad.hessian(njit(lambda a: np.sum(a ** 4)), a)
    assert h.shape == (2, 3, 2, 3)
    np.testing.assert_allclose(h.reshape(6, 6), np.diag(12 * a.ravel() ** 2), rtol=1e-12)


# ------------------------------------------------- long loops, deep chains
@njit
def _level3(x):
    return math.sin(x) * x


@njit
def _level2(x):
    return _level3(x) + _level3(2.0 * x)


@njit
def _level1(x):
    return _level2(x) * _level2(x + 1.0)


@njit
def deep_chain(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += _level1(x[i])
    return s


def test_deep_call_chain_both_modes() -> None:
    x = rng.normal(size=4)
    g = pyjlad.gradient(deep_chain, x)
    np.testing.assert_allclose(g, fd_jacobian(deep_chain, (x,), 0), rtol=1e-6)
    np.testing.assert_allclose(pyjlad.jacobian(deep_chain, x, mode="forward"), g, rtol=1e-13)


@njit
def euler_1e5(x0, k):
    x = x0.copy()
    dt = 1e-5
    for _ in range(100_000):
        for j in range(x.shape[0]):
            x[j] = x[j] + dt * (-k * x[j] + math.sin(x[(j + 1) % x.shape[0]]))
    return np.sum(x * x)


def test_100k_step_euler_both_modes() -> None:
    x0 = np.array([1.0, -0.5, 0.25])
    g = pyjlad.gradient(euler_1e5, x0, 0.7, wrt=(0, 1))
    np.testing.assert_allclose(g[0], fd_jacobian(euler_1e5, (x0, 0.7), 0), rtol=1e-6)
    assert g[1] == pytest.approx(float(fd_jacobian(euler_1e5, (x0, 0.7), 1)), rel=1e-6)
    fwd = pyjlad.jacobian(euler_1e5, x0, 0.7, wrt=(0, 1), mode="forward")
    np.testing.assert_allclose(fwd[0], g[0], rtol=1e-12)
    assert float(fwd[1]) == pytest.approx(g[1], rel=1e-12)


# ------------------------------------------------------------- bad inputs
def test_tangent_shape_mismatch() -> None:
    with pytest.raises(ValueError, match="shape"):
        pyjlad.jvp(alloc_empty, (np.ones(3), 1.0), (np.ones(4), None))


def test_tangent_for_integer_argument() -> None:
    with pytest.raises(TypeError, match="pass None"):
        pyjlad.jvp(write_into, (np.zeros(2), np.ones(2), 3), (None, None, 1.0))


def test_cotangent_structure_mismatch() -> None:
    with pytest.raises(ValueError, match="tuple of 3"):
        pyjlad.vjp(tuple_result, (np.ones(2), 1.0), np.ones(2))
    with pytest.raises(ValueError, match="shape"):
        pyjlad.vjp(alloc_empty, (np.ones(3), 1.0), np.ones(4))


def test_jacobian_mode_checked() -> None:
    with pytest.raises(ValueError, match="mode"):
        pyjlad.jacobian(alloc_empty, np.ones(2), 1.0, mode="sideways")


@njit
def overwrites_its_input(x, y):
    for i in range(x.shape[0]):
        x[i] = math.sin(x[i]) * y[i]  # x overwritten in a loop, then read back
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i] * y[i]
    return s


def overwrites_its_input_hessian(x, y):
    """Hand-derived: f = sum y^3 sin(x)^2, so d2f/dx2 = diag(2 y^3 cos(2x)) (and 2 y^3 cos(2x) v for H v)."""
    return np.diag(2.0 * y ** 3 * np.cos(2.0 * x))


@pytest.mark.parametrize("n", [1, 2, 5, 33])
def test_hvp_of_a_function_that_overwrites_its_input_in_a_loop(n) -> None:
    # Reverse over forward: the inner forward sweep writes the tangent where f writes x, so the
    # outer reverse sweep must differentiate through that memory (it lost -2 y^3 sin(x)^2 v before).
    rng = np.random.default_rng(n)
    x, y, v = rng.normal(size=n), rng.normal(size=n), rng.normal(size=n)
    x0, y0, v0 = x.copy(), y.copy(), v.copy()
    got = pyjlad.hvp(overwrites_its_input, (x, y), v)
    np.testing.assert_allclose(got, overwrites_its_input_hessian(x0, y0) @ v0, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(v, v0)
    np.testing.assert_array_equal(y, y0)
    np.testing.assert_allclose(x, np.sin(x0) * y0, rtol=0, atol=0)  # hvp runs f on the caller's arrays, as a call


@pytest.mark.parametrize("chunk", [1, 2, 32])
def test_hessian_of_a_function_that_overwrites_its_input_is_taken_at_the_point_given(chunk) -> None:
    # Column by column (chunk=1) each sweep used to run on the caller's array as the previous one left it.
    rng = np.random.default_rng(7)
    x, y = rng.normal(size=5), rng.normal(size=5)
    x0, y0 = x.copy(), y.copy()
    got = pyjlad.hessian(overwrites_its_input, x, y, chunk=chunk)
    np.testing.assert_allclose(got, overwrites_its_input_hessian(x0, y0), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
