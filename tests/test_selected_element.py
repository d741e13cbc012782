"""Functions whose result is one selected element of an array (issue 13, item 1).

``np.max(x)`` used to give a zero gradient: the returned value is only loaded,
compared and selected, so Enzyme's type analysis could not tell it was a float,
the loose-types retry took it for an integer, and the adjoint was dropped. The
driver now states the result slot's and the float arrays' types
(``__enzyme_double``). The whole class is checked against ``jax.grad`` in
float64, with the caller's arrays checked unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

X1 = np.array([0.3, -2.0, 1.0, 0.7])
X2 = np.array([[0.3, -2.0], [1.5, 0.7], [0.1, 0.2]])


@njit
def running_max(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    return m


@njit
def running_min_builtin(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        m = min(m, x[i])
    return m


@njit
def argmax_loop(x):
    k = 0
    for i in range(x.shape[0]):
        if x[i] > x[k]:
            k = i
    return x[k]


@njit
def select_in_helper(x):
    return _pick(x, 2)


@njit
def _pick(x, k):
    return x[k]


CASES = [
    ("np.max", njit(lambda x: np.max(x)), jnp.max, X1),
    ("np.min", njit(lambda x: np.min(x)), jnp.min, X1),
    ("x.max()", njit(lambda x: x.max()), jnp.max, X1),
    ("x.min() 2-D", njit(lambda x: x.min()), jnp.min, X2),
    ("np.max 2-D", njit(lambda x: np.max(x)), jnp.max, X2),
    ("running max", running_max, jnp.max, X1),
    ("running min (builtin min)", running_min_builtin, jnp.min, X1),
    ("argmax loop", argmax_loop, jnp.max, X1),
    ("x[np.argmax(x)]", njit(lambda x: x[np.argmax(x)]), lambda x: x[jnp.argmax(x)], X1),
    ("x[-1]", njit(lambda x: x[-1]), lambda x: x[-1], X1),
    ("x[1, 0]", njit(lambda x: x[1, 0]), lambda x: x[1, 0], X2),
    ("element from a helper", select_in_helper, lambda x: x[2], X1),
    ("np.sort(x)[1]", njit(lambda x: np.sort(x)[1]), lambda x: jnp.sort(x)[1], X1),
    ("np.median", njit(lambda x: np.median(x)), jnp.median, X1),
    ("np.cumsum(x)[-1]", njit(lambda x: np.cumsum(x)[-1]), lambda x: jnp.cumsum(x)[-1], X1),
    ("np.max(x * x)", njit(lambda x: np.max(x * x)), lambda x: jnp.max(x * x), X1),
    ("max - min", njit(lambda x: np.max(x) - np.min(x)), lambda x: jnp.max(x) - jnp.min(x), X1),
    ("fastmath np.max", njit(fastmath=True)(lambda x: np.max(x)), jnp.max, X1),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f, jf, x0", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_gradient_of_a_selected_element(f, jf, x0, dtype):
    x = x0.astype(dtype)
    before = x.copy()
    expected = np.asarray(jax.grad(jf)(jnp.asarray(x0)))
    rtol = 1e-12 if dtype == np.float64 else 1e-6
    np.testing.assert_allclose(pyjlad.gradient(f, x), expected, rtol=rtol, atol=0)
    np.testing.assert_allclose(pyjlad.vjp(f, (x,), 1.0)[1][0], expected, rtol=rtol, atol=0)
    np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="reverse"), expected, rtol=rtol, atol=0)
    np.testing.assert_allclose(pyjlad.jacobian(f, x, mode="forward"), expected, rtol=rtol, atol=0)
    assert x.tobytes() == before.tobytes()


def test_max_of_two_scalars():
    f = njit(lambda a, b: max(a, b) * 2.0)
    assert pyjlad.gradient(f, 1.0, 3.0, wrt=(0, 1)) == (0.0, 2.0)
    assert pyjlad.gradient(f, 4.0, 3.0, wrt=(0, 1)) == (2.0, 0.0)


def test_selected_element_inside_a_tuple_result_and_hessian():
    x = X1.copy()
    f = njit(lambda x: (np.max(x), x * 2.0))
    _, (ct,) = pyjlad.vjp(f, (x,), (1.0, np.ones(4)))
    np.testing.assert_array_equal(ct, np.asarray(jax.grad(lambda x: jnp.max(x) + jnp.sum(2 * x))(jnp.asarray(x))))
    hess = pyjlad.hessian(njit(lambda x: np.max(x * x)), x)
    np.testing.assert_array_equal(hess, np.asarray(jax.hessian(lambda x: jnp.max(x * x))(jnp.asarray(x))))
    assert x.tobytes() == X1.tobytes()


@njit
def row_max(a):
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        m = a[i, 0]
        for j in range(1, a.shape[1]):
            if a[i, j] > m:
                m = a[i, j]
        out[i] = m
    return out


@njit
def row_argmax_pick(a):
    out = np.empty(a.shape[0], dtype=a.dtype)
    for i in range(a.shape[0]):
        out[i] = a[i, np.argmax(a[i])]
    return out


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f", [row_max, row_argmax_pick], ids=["running", "argmax"])
def test_selected_elements_written_into_an_array_result(f, dtype):
    """Selected elements stored into an allocated result: the reverse modes got zeros (the
    elements' type was stated for one element only, and loads at run-time offsets of a 2-D
    array stayed untyped); the driver now types float array data at every offset."""
    a = np.array([[2.0, 11.0, 3.0, 10.0, 0.0], [4.0, 7.0, 5.0, 14.0, 12.0], [6.0, 9.0, 13.0, 8.0, 1.0]], dtype=dtype)
    before = a.copy()
    expected = np.asarray(jax.jacrev(lambda a: jnp.max(a, axis=1))(jnp.asarray(a, dtype=jnp.float64)))
    for mode in ("reverse", "forward"):
        np.testing.assert_array_equal(pyjlad.jacobian(f, a, mode=mode), expected)
    ct = np.array([1.0, -2.0, 0.5], dtype=dtype)
    np.testing.assert_array_equal(pyjlad.vjp(f, (a,), ct)[1][0], np.tensordot(ct.astype(np.float64), expected, axes=1))
    assert a.tobytes() == before.tobytes()
