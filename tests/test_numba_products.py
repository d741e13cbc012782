"""Callable products (``jacrev``, ``jacfwd``, ``jvp_fn``, ``vjp_fn``, ``hvp_fn``) from Python and from Numba.

Issue 16, part 1: the callable forms of the products give from Python what the
immediate forms give, and are callable from ``@njit`` (as an argument, a global or
a closure variable), ``@njit(parallel=True)`` and ``@cfunc`` code with the same
results. Oracles: JAX in float64 on ``jax.numpy`` twins, evaluated on copies of
the inputs taken before the call; the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import cfunc, njit, prange
from numba.core.errors import TypingError

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(1617)
X = RNG.normal(size=4)
C = 0.7


# ------------------------------------------------------------------ functions and their JAX twins
@njit
def vec(x, c, k):
    return np.sin(x) * c * x[0] + k * x * x


def vec_jax(x, c, k):
    return jnp.sin(x) * c * x[0] + k * x * x


@njit
def scal(x, c):
    return np.sum(np.sin(x) * x) * c + c * c * x[1]


def scal_jax(x, c):
    return jnp.sum(jnp.sin(x) * x) * c + c * c * x[1]


def close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-12)


def callers(product):
    """The same call made from @njit code three ways: argument, global, closure."""
    @njit
    def as_argument(p, *args):
        return p(*args)

    namespace = {"P": product}
    exec("def as_global(*args):\n    return P(*args)\n", namespace)  # noqa: S102 - a fixed test source
    as_global = njit(namespace["as_global"])

    def closing(p):
        @njit
        def as_closure(*args):
            return p(*args)
        return as_closure

    return {"argument": lambda *a: as_argument(product, *a), "global": as_global, "closure": closing(product)}


HOW = ["argument", "global", "closure"]


# ------------------------------------------------------------------ Jacobians
@pytest.mark.parametrize("how", HOW)
@pytest.mark.parametrize("form", ["jacrev", "jacfwd"])
def test_jacobian_of_array_function(form, how):
    x = X.copy()
    oracle = getattr(jax, form)(vec_jax, argnums=(0, 1))(x.copy(), C, 2)
    product = getattr(pyjlad, form)(vec, wrt=(0, 1))
    got = callers(product)[how](x, C, 2)
    close(got[0], oracle[0])
    close(got[1], oracle[1])
    assert got[1].shape == (4,)
    close(x, X)


@pytest.mark.parametrize("form", ["jacrev", "jacfwd"])
def test_jacobian_python_form_is_the_immediate_form(form):
    x = X.copy()
    mode = "reverse" if form == "jacrev" else "forward"
    product = getattr(pyjlad, form)(vec, wrt=0)
    np.testing.assert_array_equal(product(x, C, 2), pyjlad.jacobian(vec, x, C, 2, wrt=0, mode=mode))
    close(product(x, C, 2), jax.jacrev(vec_jax)(X.copy(), C, 2))


@pytest.mark.parametrize("form", ["jacrev", "jacfwd"])
def test_jacobian_of_scalar_function_matches_python(form):
    x = X.copy()
    product = getattr(pyjlad, form)(scal, wrt=(0, 1))
    in_numba = njit(lambda x, c: product(x, c))(x, C)
    in_python = product(x, C)
    oracle = jax.grad(scal_jax, argnums=(0, 1))(X.copy(), C)
    for got, want, expect in zip(in_numba, in_python, oracle):
        close(got, expect)
        assert np.shape(got) == np.shape(want)
    close(x, X)


def test_jacobian_of_strided_and_readonly_views_leaves_them_unchanged():
    base = RNG.normal(size=(3, 8))
    before = base.copy()
    readonly = base[1].copy()
    readonly.setflags(write=False)
    jac = pyjlad.jacrev(vec)
    got = njit(lambda a, b: (jac(a[0, ::2], C, 1), jac(b, C, 1)))(base, readonly)
    close(got[0], jax.jacrev(vec_jax)(before[0, ::2].copy(), C, 1))
    close(got[1], jax.jacrev(vec_jax)(before[1].copy(), C, 1))
    np.testing.assert_array_equal(base, before)


def test_jacobian_in_prange_loop_matches_serial():
    xs = RNG.normal(size=(6, 4))
    before = xs.copy()
    jac = pyjlad.jacfwd(vec)

    @njit(parallel=True)
    def all_jacobians(xs):
        out = np.empty((xs.shape[0], xs.shape[1], xs.shape[1]))
        for i in prange(xs.shape[0]):
            out[i] = jac(xs[i], C, 3)
        return out

    got = all_jacobians(xs)
    for i in range(xs.shape[0]):
        close(got[i], jax.jacfwd(vec_jax)(before[i].copy(), C, 3))
    np.testing.assert_array_equal(xs, before)


def test_jacobian_from_cfunc():
    jac = pyjlad.jacrev(vec)

    @cfunc("float64(float64)")
    def corner(v):
        x = np.full(4, v)
        return jac(x, C, 2)[3, 0]

    want = jax.jacrev(vec_jax)(np.full(4, 0.3), C, 2)[3, 0]
    close(corner.ctypes(0.3), want)


# ------------------------------------------------------------------ jvp / vjp / hvp
@pytest.mark.parametrize("how", HOW)
def test_jvp_fn(how):
    x, t = X.copy(), RNG.normal(size=4)
    x0, t0 = x.copy(), t.copy()
    product = pyjlad.jvp_fn(vec)
    value, tangent = callers(product)[how]((x, C, 2), (t, 0.5, None))
    want_value, want_tangent = jax.jvp(lambda x, c: vec_jax(x, c, 2), (x0, C), (t0, 0.5))
    close(value, want_value)
    close(tangent, want_tangent)
    close(x, x0)
    close(t, t0)
    py_value, py_tangent = product((x, C, 2), (t, 0.5, None))
    close(py_tangent, tangent)
    close(py_value, value)


def test_jvp_fn_of_scalar_function():
    x, t = X.copy(), RNG.normal(size=4)
    product = pyjlad.jvp_fn(scal)
    value, tangent = njit(lambda x, t: product((x, C), (t, None)))(x, t)
    want = jax.jvp(lambda x: scal_jax(x, C), (X.copy(),), (t.copy(),))
    close(value, want[0])
    close(tangent, want[1])


@pytest.mark.parametrize("how", HOW)
def test_vjp_fn(how):
    x, ct = X.copy(), RNG.normal(size=4)
    x0, ct0 = x.copy(), ct.copy()
    product = pyjlad.vjp_fn(vec)
    value, (dx, dc, dk) = callers(product)[how]((x, C, 2), ct)
    want_value, pullback = jax.vjp(lambda x, c: vec_jax(x, c, 2), x0, C)
    want_dx, want_dc = pullback(ct0)
    close(value, want_value)
    close(dx, want_dx)
    close(dc, want_dc)
    assert dk is None
    close(x, x0)
    close(ct, ct0)
    py_value, py_cots = product((x, C, 2), ct)
    close(py_cots[0], dx)
    assert py_cots[2] is None


def test_vjp_fn_of_scalar_function():
    x = X.copy()
    product = pyjlad.vjp_fn(scal)
    value, (dx, dc) = njit(lambda x: product((x, C), 3.0))(x)
    want_value, pullback = jax.vjp(scal_jax, X.copy(), C)
    want_dx, want_dc = pullback(3.0)
    close(value, want_value)
    close(dx, want_dx)
    close(dc, want_dc)


@pytest.mark.parametrize("how", HOW)
def test_hvp_fn(how):
    x, v = X.copy(), RNG.normal(size=4)
    x0, v0 = x.copy(), v.copy()
    product = pyjlad.hvp_fn(scal)
    got = callers(product)[how]((x, C), v)
    want = jax.jvp(jax.grad(lambda x: scal_jax(x, C)), (x0,), (v0,))[1]
    close(got, want)
    close(product((x, C), v), want)
    close(x, x0)
    close(v, v0)


def test_hvp_fn_scalar_argument():
    product = pyjlad.hvp_fn(scal, wrt=1)
    got = njit(lambda x: product((x, C), 2.0))(X.copy())
    want = 2.0 * jax.hessian(scal_jax, argnums=1)(X.copy(), C)
    close(got, want)


# ------------------------------------------------------------------ bad input
def test_bad_argument_types_give_a_typing_error_that_says_what_is_accepted():
    jac = pyjlad.jacrev(vec)
    with pytest.raises(TypingError, match=r"argument 0 .* has type array\(int64.*no derivative.*accepts"):
        njit(lambda x: jac(x, C, 2))(np.arange(4))
    jv = pyjlad.jvp_fn(vec)
    with pytest.raises(TypingError, match=r"primals must be a tuple.*accepts \(primals, tangents\)"):
        njit(lambda x: jv(x, x))(X.copy())
    hv = pyjlad.hvp_fn(vec)
    with pytest.raises(TypingError, match=r"must return a float"):
        njit(lambda x: hv((x, C, 2), x))(X.copy())


def test_mismatched_shapes_raise_inside_numba():
    vj = pyjlad.vjp_fn(vec)
    with pytest.raises(ValueError, match="cotangent must have the shape"):
        njit(lambda x, ct: vj((x, C, 2), ct))(X.copy(), np.ones(3))


def test_python_form_checks_its_arguments():
    with pytest.raises(pyjlad.ArgumentTypeError, match="wrt"):
        pyjlad.jacrev(vec, wrt="x")
    with pytest.raises(pyjlad.ArgumentError, match="takes 2 arguments"):
        pyjlad.jvp_fn(vec)(X)


@njit
def guarded(x):
    if x[0] < 0.0:
        raise ValueError("x[0] must be non-negative")
    return x * x


@pytest.mark.parametrize("form", ["jacrev", "jacfwd"])
def test_an_exception_the_function_raises_propagates_from_numba(form):
    product = getattr(pyjlad, form)(guarded)
    call = njit(lambda x: product(x))
    close(call(np.array([1.0, 2.0])), np.diag([2.0, 4.0]))
    with pytest.raises(ValueError, match="must be non-negative"):
        call(np.array([-1.0, 2.0]))


def test_a_repeated_wrt_gives_the_jacobian_twice():
    jac = pyjlad.jacrev(scal, wrt=(1, 0, 1))
    got = njit(lambda x: jac(x, C))(X.copy())
    dx, dc = jax.jacrev(scal_jax, argnums=(0, 1))(X.copy(), C)  # JAX refuses a repeated argnums
    for g, w in zip(got, (dc, dx, dc)):
        close(g, w)


@njit
def squares(x, c):
    return c * np.sum(x * x)


@njit
def sines(x, c):
    return c * np.sum(np.sin(x))


def test_products_of_the_same_shape_called_with_the_same_types_each_run_their_own_function():
    """Their generated implementations have the same source: each must still be compiled with its own sweeps
    (Numba's compile_internal cache is keyed by the code object, equal for equal source)."""
    x, t = X.copy(), RNG.normal(size=4)
    jvp_squares, jvp_sines = pyjlad.jvp_fn(squares), pyjlad.jvp_fn(sines)
    jac_squares, jac_sines = pyjlad.jacrev(squares), pyjlad.jacrev(sines)
    _, d1 = njit(lambda x, t: jvp_squares((x, C), (t, None)))(x, t)
    _, d2 = njit(lambda x, t: jvp_sines((x, C), (t, None)))(x, t)
    close(d1, C * 2 * X @ t)
    close(d2, C * np.cos(X) @ t)
    close(njit(lambda x: jac_squares(x, C))(x), C * 2 * X)
    close(njit(lambda x: jac_sines(x, C))(x), C * np.cos(X))
    np.testing.assert_array_equal(x, X)
