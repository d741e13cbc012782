"""Arrays a parallel loop reads only at each iteration's own element (:func:`pyjlad.row_offsets.own_elements`).

Such an array (an operand of an array expression, ``w[i]`` in a ``prange`` from 0) is passed in place to the
body's copy, whose adds into its adjoint are then plain instead of atomic: no other thread adds into its
elements. Gradients with ``PYJLAD_PARALLEL_DERIVATIVES=1`` at 2 threads against hand-derived values and JAX
(float64), computed from copies taken before the call; the caller's arrays must come back unchanged.
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange
from parallel_checks import parallel_grad as _grad

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.private_adjoints import recording_loop_layouts

pytestmark = pytest.mark.usefixtures("parallel_two_threads")


@njit(parallel=True)
def products(a, b):
    return np.sum(a * b)  # an array expression: a loop (of a's dimensions) reading a[i, j] and b[i, j]


@njit(parallel=True)
def weighted(w, x):
    e = 0.0
    for i in prange(x.shape[0]):
        e += w[i] * np.sin(x[i])
    return e


@njit(parallel=True)
def mirrored(a):
    b = a[::-1]  # a's elements read by two iterations: a[i] in one, b[n - 1 - i] in the other
    return np.sum(a * b)


@njit(parallel=True)
def from_one(w, x):
    e = 0.0
    for i in prange(1, x.shape[0]):  # a start Numba keeps in a variable: not known to be 0 or more
        e += w[i] * x[i]
    return e


@njit(parallel=True)
def also_first(w, x):
    e = 0.0
    for i in prange(x.shape[0]):
        e += w[i] * x[i] * x[0]  # x read at element 0 by every iteration
    return e


@njit(parallel=True)
def overwritten_after(x):
    y = np.sin(x)
    e = 0.0
    for i in prange(x.shape[0]):
        e += y[i] * y[i]  # y read in place...
    y[:] = 0.0  # ...and overwritten before the reverse sweep reads what the loop read
    return e + y.sum()


@njit(parallel=True)
def argument_overwritten(x, w):
    e = np.sum(w * x)
    w[:] = 0.0
    return e


def _in_place(f, args) -> int:
    layouts = {}
    with recording_loop_layouts(layouts):
        njit(parallel=True)(f.py_func)(*args)
    return sum(a.in_place for layout in layouts.values() for a in layout.candidates)


def test_arrays_read_at_their_own_elements_are_found():
    x, m = np.ones(6), np.ones((3, 4))
    assert _in_place(products, (m, m)) == 2
    assert _in_place(weighted, (x, x)) == 2
    assert _in_place(mirrored, (x,)) == 1  # a (its reversed view b: strides of its own, not in place)
    assert _in_place(from_one, (x, x)) == 0
    assert _in_place(also_first, (x, x)) == 1  # w only


@pytest.mark.parametrize("order", ["C", "F"])
def test_products_gradient_is_the_other_factor_exactly(order):
    rng = np.random.default_rng(1)
    a, b = (np.asarray(rng.normal(size=(37, 23)), order=order) for _ in range(2))
    a0, b0 = a.copy(), b.copy()
    ga, gb = _grad(products, (a, b), (0, 1))
    np.testing.assert_array_equal(ga, b0)  # d/da sum(a * b) = b: one product per element, no sum to reorder
    np.testing.assert_array_equal(gb, a0)


def test_equal_at_every_thread_count():
    a = np.random.default_rng(2).normal(size=(101, 13))
    for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        numba.set_num_threads(threads)
        for _ in range(3):
            np.testing.assert_array_equal(_grad(products, (a, 2.0 * a), (0,))[0], 2.0 * a)


def test_a_broadcast_row_is_not_in_place():
    """b of shape (m,) is read at b[j] by every row's iterations: its adjoint's adds stay atomic."""
    rng = np.random.default_rng(7)
    a, b = rng.normal(size=(400, 33)), rng.normal(size=33)
    a0, b0 = a.copy(), b.copy()
    assert _in_place(products, (a, b)) == 1
    ga, gb = _grad(products, (a, b), (0, 1))
    np.testing.assert_array_equal(ga, np.broadcast_to(b0, a0.shape))
    np.testing.assert_allclose(gb, a0.sum(axis=0), rtol=1e-13, atol=1e-13)


def test_the_same_array_twice():
    a = np.random.default_rng(3).normal(size=(9, 8))
    ga, gb = _grad(products, (a, a), (0, 1))
    np.testing.assert_array_equal(ga, a)
    np.testing.assert_array_equal(gb, a)


def test_an_array_sharing_its_elements_with_another_adds_atomically():
    """a and its reversed view b share every element: the overlap check sends every row to the body as
    Numba compiled it (atomic adds), and the gradient is 2 * a[::-1]."""
    a = np.random.default_rng(4).normal(size=1001)
    a0 = a.copy()
    (g,) = _grad(mirrored, (a,), (0,))
    np.testing.assert_allclose(g, 2.0 * a0[::-1], rtol=1e-15, atol=0)


@pytest.mark.parametrize("f", [weighted, from_one, also_first])
def test_prange_loops_against_jax(f):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    rng = np.random.default_rng(5)
    w, x = rng.normal(size=501), rng.normal(size=501)
    w0, x0 = w.copy(), x.copy()
    twins = {weighted: lambda w, x: jnp.sum(w * jnp.sin(x)), from_one: lambda w, x: jnp.sum(w[1:] * x[1:]),
             also_first: lambda w, x: jnp.sum(w * x * x[0])}
    want = jax.grad(twins[f], argnums=(0, 1))(w0, x0)
    for got, expected in zip(_grad(f, (w, x), (0, 1)), want):
        np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-12, atol=1e-12)


def test_arrays_overwritten_after_the_loop():
    """What the loop read in place is overwritten afterwards: the reverse sweep must use what it read then."""
    rng = np.random.default_rng(8)
    x, w = rng.normal(size=1000), rng.normal(size=1000)
    x0, w0 = x.copy(), w.copy()
    assert _in_place(overwritten_after, (x0,)) == 1 and _in_place(argument_overwritten, (x0, w0.copy())) == 2
    (g,) = _grad(overwritten_after, (x,), (0,))
    np.testing.assert_allclose(g, 2.0 * np.sin(x0) * np.cos(x0), rtol=1e-13, atol=1e-15)
    with warnings.catch_warnings():  # (the function zeroes w; the gradient runs it, so w is zeroed too)
        warnings.simplefilter("error", ParallelFallbackWarning)
        gx, gw = pyjlad.grad(argument_overwritten, wrt=(0, 1))(x, w)
    np.testing.assert_array_equal(gx, w0)
    np.testing.assert_array_equal(gw, x0)


def test_in_place_adds_are_plain(tmp_path, monkeypatch):
    """Before, Enzyme added into a's and b's adjoints atomically (a compare-and-swap loop per element on x86)."""
    monkeypatch.setenv("PYJLAD_DUMP_IR", str(tmp_path))
    fresh = njit(parallel=True)(products.py_func)  # its own derivative, built (and dumped) here
    a = np.random.default_rng(6).normal(size=(40, 30))
    _grad(fresh, (a, a + 1.0), (0, 1))
    outputs = list(tmp_path.glob("*/*-enzyme.output.ll"))
    assert len(outputs) == 1
    text = outputs[0].read_text()
    assert "%pyjlad.plain." in text
    assert "@malloc(i64 %priv" not in text  # nothing copied
