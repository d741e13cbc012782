"""``np.logaddexp``/``np.logaddexp2`` at a tie (``x == y``) differentiated as the smooth functions
(:mod:`pyjlad.smooth_logaddexp`), and ``np.sinc`` at 0 (:mod:`pyjlad.smooth_sinc`).

Numba's implementation returns ``x + log(2)`` where ``x == y``, whose derivative Enzyme took: ``(1, 0)``
instead of ``(1/2, 1/2)`` and a zero second derivative. Softplus ``np.logaddexp(0.0, z)`` at ``z = 0``, a
logistic regression started at zero weights, so had a wrong gradient and a zero Hessian (a user-style probe,
2026-12-04). Oracle: ``jax`` in float64 on the same programs; inputs copied before each call.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261204)
X = RNG.normal(size=(12, 3))
Y = (RNG.random(12) > 0.5).astype(np.float64)


@njit
def _pair(a, b):
    return np.logaddexp(a, b)


@njit
def _pair2(a, b):
    return np.logaddexp2(a, b)


@njit
def _logreg_loops(theta, X, y):
    s = 0.0
    for i in range(X.shape[0]):
        z = 0.0
        for j in range(X.shape[1]):
            z += X[i, j] * theta[j]
        s += np.logaddexp(0.0, z) - y[i] * z
    return s


@njit
def _logreg_matmul(theta, X, y):
    z = X @ theta
    return np.sum(np.logaddexp(0.0, z) - y * z)


@njit
def _softplus_sum(x):
    return np.sum(np.logaddexp(x, 0.0))


def _logreg_jax(theta, X, y):
    z = X @ theta
    return jnp.sum(jnp.logaddexp(0.0, z) - y * z)


@pytest.mark.parametrize("f, twin", [(_pair, jnp.logaddexp), (_pair2, jnp.logaddexp2)], ids=["logaddexp", "logaddexp2"])
@pytest.mark.parametrize("a, b", [(1.0, 1.0), (-3.5, -3.5), (0.0, 0.0), (1.0, 2.5), (4.0, -1.0)])
def test_a_pair_at_and_off_a_tie_matches_jax(f, twin, a, b) -> None:
    expected = jax.grad(twin, argnums=(0, 1))(a, b)
    got = pyjlad.gradient(f, a, b, wrt=(0, 1))
    np.testing.assert_allclose(got, [float(e) for e in expected], rtol=1e-13)


@pytest.mark.parametrize("f", [_logreg_loops, _logreg_matmul], ids=["loops", "matmul"])
def test_logistic_regression_at_zero_weights_matches_jax(f) -> None:
    theta, x, y = np.zeros(3), X.copy(), Y.copy()
    expected = np.asarray(jax.grad(_logreg_jax)(jnp.zeros(3), jnp.asarray(X), jnp.asarray(Y)))
    np.testing.assert_allclose(pyjlad.gradient(f, theta, x, y), expected, rtol=1e-12)
    hessian = np.asarray(jax.hessian(_logreg_jax)(jnp.zeros(3), jnp.asarray(X), jnp.asarray(Y)))
    np.testing.assert_allclose(pyjlad.hessian(f, theta, x, y), hessian, rtol=1e-12)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(theta, np.zeros(3))


def test_softplus_of_an_array_at_zero_and_infinite_ties_keep_their_values() -> None:
    """At ``x = 0``: gradient 1/2 and Hessian diagonal 1/4 (``jax``); ``logaddexp(-inf, -inf)`` is still ``-inf``
    (the tie branch's reason) in the value the gradient call computes."""
    x = np.array([0.0, 0.0, 1.5])
    np.testing.assert_allclose(pyjlad.gradient(_softplus_sum, x.copy()),
                               np.asarray(jax.grad(lambda v: jnp.sum(jnp.logaddexp(v, 0.0)))(x)), rtol=1e-13)
    np.testing.assert_allclose(pyjlad.hessian(_softplus_sum, x.copy()),
                               np.asarray(jax.hessian(lambda v: jnp.sum(jnp.logaddexp(v, 0.0)))(x)), rtol=1e-13)
    value, _ = pyjlad.value_and_gradient(_pair, -np.inf, -np.inf, wrt=(0, 1))
    assert value == -np.inf
    value, _ = pyjlad.value_and_gradient(_pair, np.inf, np.inf, wrt=(0, 1))
    assert value == np.inf


# The tie's operands as LLVM leaves them: an argument negated, scaled or shifted (until 2026-12-07 the smooth form
# was written from the operands of the tie's comparison, which LLVM rewrites: -np.logaddexp(0.0, -z) compares z
# with 0, and its gradient at z = 0 was -1/2 for +1/2). Each form with its JAX twin, at ties and off them.
_TIE_FORMS = {
    "log-sigmoid -logaddexp(0, -z)": ("-np.logaddexp(0.0, -z)", lambda z: -jnp.logaddexp(0.0, -z)),
    "logaddexp(-z, 0)": ("np.logaddexp(-z, 0.0)", lambda z: jnp.logaddexp(-z, 0.0)),
    "logaddexp(0, 2z)": ("np.logaddexp(0.0, 2.0 * z)", lambda z: jnp.logaddexp(0.0, 2.0 * z)),
    "logaddexp(0, z - 1)": ("np.logaddexp(0.0, z - 1.0)", lambda z: jnp.logaddexp(0.0, z - 1.0)),
    "logaddexp(z/2, -z)": ("np.logaddexp(0.5 * z, -z)", lambda z: jnp.logaddexp(0.5 * z, -z)),
    "logaddexp(-z, -z*z)": ("np.logaddexp(-z, -z * z)", lambda z: jnp.logaddexp(-z, -z * z)),
    "logaddexp2(0, -z)": ("np.logaddexp2(0.0, -z)", lambda z: jnp.logaddexp2(0.0, -z)),
}


def _tie_function(expression: str, form: str):
    """``f(x)`` summing ``expression`` of ``z`` over ``x``'s elements: in a loop or as an array expression."""
    if form == "loop":
        source = (f"def f(x):\n    s = 0.0\n    for i in range(x.shape[0]):\n        z = x[i]\n"
                  f"        s += (i + 1.0) * ({expression})\n    return s\n")
    else:
        source = f"def f(x):\n    z = x\n    return np.sum(np.arange(1.0, x.shape[0] + 1.0) * ({expression}))\n"
    namespace = {"np": np}
    exec(source, namespace)  # noqa: S102 - the test's own expressions
    return njit(namespace["f"])


@pytest.mark.parametrize("form", ["loop", "array"])
@pytest.mark.parametrize("name", list(_TIE_FORMS))
def test_ties_of_negated_scaled_and_shifted_arguments_match_jax(name, form) -> None:
    expression, twin = _TIE_FORMS[name]
    f = _tie_function(expression, form)
    x = np.array([0.0, 1.0, -0.0, 0.3, -1.25])  # ties at 0 (and 1 for z - 1 and -z*z), a point off them
    before = x.copy()

    def oracle(v):
        return jnp.sum(jnp.arange(1.0, v.shape[0] + 1.0) * twin(v))

    np.testing.assert_allclose(pyjlad.gradient(f, x), np.asarray(jax.grad(oracle)(before)), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(f, x), np.asarray(jax.hessian(oracle)(before)), rtol=1e-12, atol=1e-15)
    assert f(x) == pytest.approx(float(oracle(before)), rel=1e-14)
    np.testing.assert_array_equal(x, before)


def test_float32_ties_match_jax() -> None:
    f = _tie_function("-np.logaddexp(np.float32(0.0), -z)", "loop")
    x = np.array([0.0, 0.5, 0.0], dtype=np.float32)
    before = x.copy()

    def oracle(v):
        return jnp.sum(jnp.arange(1.0, 4.0) * -jnp.logaddexp(0.0, -v))

    got = pyjlad.gradient(f, x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.asarray(jax.grad(oracle)(before.astype(np.float64))), rtol=2e-6)
    np.testing.assert_array_equal(x, before)


@njit
def _sinc_sum(x):
    return np.sum(np.sinc(x))


@njit
def _sinc_loop(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += np.sinc(x[i]) * (i + 1.0)
    return s


@njit
def _sinc_scalar(a):
    return np.sinc(a)


@pytest.mark.parametrize("f, weights", [(_sinc_sum, np.ones(4)), (_sinc_loop, np.arange(1.0, 5.0))],
                         ids=["array", "loop"])
def test_sinc_at_zero_has_its_second_derivative(f, weights) -> None:
    """Numba's ``np.sinc`` evaluates ``sinc(1e-20)`` at 0, a constant to Enzyme: its Hessian there was 0, not
    ``-pi^2/3`` (the value and gradient were right). Oracle: ``jax`` on the same sum."""
    x = np.array([0.0, 0.5, -0.0, 1.25])

    def twin(v):
        return jnp.sum(jnp.sinc(v) * weights)

    assert f(x.copy()) == pytest.approx(float(twin(x)), rel=1e-15)
    np.testing.assert_allclose(pyjlad.gradient(f, x.copy()), np.asarray(jax.grad(twin)(x)), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pyjlad.hessian(f, x.copy()), np.asarray(jax.hessian(twin)(x)), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(pyjlad.hvp(f, (x.copy(),), np.ones(4)),
                               np.asarray(jax.hessian(twin)(x)) @ np.ones(4), rtol=1e-12, atol=1e-15)


def test_sinc_of_a_number_at_zero() -> None:
    assert pyjlad.gradient(_sinc_scalar, 0.0) == 0.0
    assert pyjlad.hessian(_sinc_scalar, 0.0) == pytest.approx(-np.pi ** 2 / 3, rel=1e-14)
    assert pyjlad.hessian(_sinc_scalar, 0.3) == pytest.approx(float(jax.hessian(jnp.sinc)(0.3)), rel=1e-12)


@pytest.mark.parametrize("f", [_sinc_sum, _sinc_loop], ids=["array", "loop"])
def test_float32_sinc_at_zero_has_its_second_derivative(f) -> None:
    """For float32, Numba's ``1e-20`` makes the sinc a double of ``x`` widened; until 2026-12-07 that form was not
    recognised and the Hessian at 0 was 0 (a user-style probe). Oracle: ``jax`` in float64 on the same sum."""
    x = np.array([0.0, 0.5, -0.0, 1.25], dtype=np.float32)
    before = x.copy()
    weights = np.ones(4) if f is _sinc_sum else np.arange(1.0, 5.0)

    def twin(v):
        return jnp.sum(jnp.sinc(v) * weights)

    wide = before.astype(np.float64)
    np.testing.assert_allclose(pyjlad.hessian(f, x), np.asarray(jax.hessian(twin)(wide)), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pyjlad.gradient(f, x), np.asarray(jax.grad(twin)(wide)), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(x, before)
