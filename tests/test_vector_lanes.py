"""Interleaved vector sweeps (pyjlad.vector_lanes): the W directions of each element adjacent in memory.

Jacobians and batched products run the function on a strided view of each differentiated array it
does not write (Numba's ``A`` layout) and address its W shadows one element apart. Checked here:
results against JAX (float64) on N-d inputs and outputs, several arguments, chunks that do not
divide the count, float32, mixed layouts (an argument the function writes stays stacked), the
fallback to stacked shadows where a function refuses strided arrays, and the caller's arrays.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.activity import Activity
from pyjlad.engines.vector_driver import vector_driver, vector_hvp_driver
from pyjlad.export import export, numba_argtypes
from pyjlad.vector_plan import type_key
from pyjlad.vector_products import _interleaving_refused

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)


@njit
def mixing(x, a):
    out = np.empty((x.shape[0], 3), x.dtype)
    for i in range(x.shape[0]):
        for j in range(3):
            out[i, j] = np.sin(x[i, j]) * a[j] + x[i, (j + 1) % 3] ** 2
    return out


def mixing_jax(x, a):
    return jnp.sin(x) * a + jnp.roll(x, -1, axis=1) ** 2


@njit
def layer(w, x, b):
    y = np.empty(w.shape[0])
    for i in range(w.shape[0]):
        acc = b[i]
        for j in range(w.shape[1]):
            acc += w[i, j] * x[j]
        y[i] = np.tanh(acc)
    return y


@njit
def contiguous_only(x):
    if not x.flags.c_contiguous:
        raise ValueError("this function takes contiguous arrays only")
    return np.sin(x) * x


@njit
def into(x, out):
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] + 1.0


def _inputs(seed=3, n=7):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.normal(size=3)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("chunk", [2, 5, 32])
def test_nd_input_and_output_two_arguments_match_jax(mode, chunk) -> None:
    x, a = _inputs()
    x0, a0 = x.copy(), a.copy()
    got = pyjlad.jacobian(mixing, x, a, wrt=(0, 1), mode=mode, chunk=chunk)
    want = jax.jacfwd(mixing_jax, argnums=(0, 1))(x0, a0)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(a, a0)
    assert not _interleaving_refused(mixing, None, (mode, type_key((x, a)), (True, True)))[0]


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_dense_layer_jacobian_matches_jax(mode) -> None:
    rng = np.random.default_rng(5)
    n = 24
    w, x, b = rng.normal(size=(n, n)) / 5, rng.normal(size=n), rng.normal(size=n)
    want = jax.jacfwd(lambda x_: jnp.tanh(w @ x_ + b))(x.copy())
    got = pyjlad.jacobian(layer, w, x, b, wrt=1, mode=mode, chunk=16)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-13)


def test_float32_arrays() -> None:
    x, a = _inputs(seed=4)
    want = jax.jacfwd(mixing_jax)(x, a)
    got = pyjlad.jacobian(mixing, x.astype(np.float32), a.astype(np.float32), mode="forward", chunk=4)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.asarray(want), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_function_refusing_strided_arrays_falls_back_to_stacked_shadows(mode) -> None:
    x = np.linspace(-1.0, 2.0, 9)
    want = jax.jacfwd(lambda x_: jnp.sin(x_) * x_)(x.copy())
    for _ in range(2):  # the first call finds out, the second remembers
        got = pyjlad.jacobian(contiguous_only, x, mode=mode, chunk=4)
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-13, atol=1e-14)
    assert _interleaving_refused(contiguous_only, None, (mode, type_key((x,)), (True,)))[0]


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_a_written_argument_keeps_its_layout_next_to_an_interleaved_one(mode) -> None:
    x = np.array([0.5, -1.5, 2.0, 3.0])
    out = np.zeros(4)
    got = pyjlad.jacobian(into, x, out, wrt=0, mode=mode, chunk=3)
    np.testing.assert_allclose(got, np.diag(2.0 * x), rtol=1e-15)  # d(x_i^2 + 1)/dx_j, by hand
    np.testing.assert_array_equal(x, [0.5, -1.5, 2.0, 3.0])


def test_batched_products_match_jax() -> None:
    x, a = _inputs(seed=6, n=5)
    rng = np.random.default_rng(7)
    tx, cot = rng.normal(size=(6, 5, 3)), rng.normal(size=(6, 5, 3))
    value, tangents = pyjlad.jvp(mixing, (x, a), (tx, None), batched=True, chunk=4)
    want_t = jax.vmap(lambda t: jax.jvp(lambda x_: mixing_jax(x_, a), (x,), (t,))[1])(tx)
    np.testing.assert_allclose(value, np.asarray(mixing_jax(x, a)), rtol=1e-14)
    np.testing.assert_allclose(tangents, np.asarray(want_t), rtol=1e-12, atol=1e-13)
    _, cots = pyjlad.vjp(mixing, (x, a), cot, batched=True, chunk=4)
    _, pull = jax.vjp(mixing_jax, x, a)
    want_c = jax.vmap(pull)(cot)
    for g, w in zip(cots, want_c):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-13)


@njit
def dot(x, y):
    return np.sum(x * y)


def test_the_driver_steps_one_element_between_interleaved_shadows() -> None:
    strided, contiguous = np.zeros((3, 5))[:, 0], np.zeros(3)
    abi = export(dot, numba_argtypes((strided, contiguous))).abi
    text = vector_driver(abi, "forward", (Activity.DUP, Activity.DUP), 4, interleaved=(0,)).text
    assert "%shadow0.off3 = mul i64 8, 3" in text  # interleaved: one double apart
    assert "%shadow1.step = mul i64" in text  # stacked: nitems * itemsize apart


@njit
def energy(x, w):
    acc = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[1]):
            acc += np.log1p(np.exp(w[j] * x[i, j])) + 0.5 * x[i, j] * x[i, (j + 1) % x.shape[1]] ** 2
    return acc


def energy_jax(x, w):
    return jnp.sum(jnp.log1p(jnp.exp(w * x))) + 0.5 * jnp.sum(x * jnp.roll(x, -1, axis=1) ** 2)


@pytest.mark.parametrize("chunk", [3, 8, 32])
def test_hessian_of_a_matrix_argument_matches_jax(chunk) -> None:
    rng = np.random.default_rng(11)
    x, w = rng.normal(size=(4, 3)), rng.normal(size=3)
    x0 = x.copy()
    got = pyjlad.hessian(energy, x, w, chunk=chunk)
    want = jax.hessian(energy_jax)(x0, w)
    assert got.shape == (4, 3, 4, 3)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(x, x0)
    assert not _interleaving_refused(energy, None, ("hessian", type_key((x, w)), 0))[0]


@pytest.mark.parametrize("chunk", [2, 5])
def test_hessian_of_a_function_refusing_strided_arrays_falls_back(chunk) -> None:
    x = np.linspace(-1.0, 1.5, 5)
    want = np.diag(2.0 * np.cos(x) - x * np.sin(x))  # d2/dx2 of sum(sin(x) * x), by hand
    for _ in range(2):
        got = pyjlad.hessian(contiguous_sum, x, chunk=chunk)
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    assert _interleaving_refused(contiguous_sum, None, ("hessian", type_key((x,)), 0))[0]


@njit
def contiguous_sum(x):
    return np.sum(contiguous_only(x))


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_buffers_kept_between_calls_carry_nothing_over(mode) -> None:
    rng = np.random.default_rng(13)
    w, b = rng.normal(size=(6, 6)) / 3, rng.normal(size=6)
    for _ in range(3):  # the second and third calls reuse the first one's interleaved buffers
        x = rng.normal(size=6)
        want = jax.jacfwd(lambda x_: jnp.tanh(w @ x_ + b))(x.copy())
        np.testing.assert_allclose(pyjlad.jacobian(layer, w, x, b, wrt=1, mode=mode, chunk=4), np.asarray(want),
                                   rtol=1e-12, atol=1e-13)


@njit
def softplus_loss(x, w):
    acc = 0.0
    n, m = w.shape
    for i in range(n):
        z = 0.0
        for j in range(m):
            z += w[i, j] * x[j]
        acc += np.log1p(np.exp(z))
    for j in range(m):
        acc += 0.5 * x[j] * x[j]
    return acc


@pytest.mark.parametrize("chunk", [49, 64])
def test_wide_hessian_sweeps_match_jax_call_after_call(chunk) -> None:
    """Regression: from 49 directions per sweep the Hessian's sweep is too large to inline, and LLVM
    deleted the zeroing of its seed's tangents (Enzyme had kept the primal's ``argmemonly`` on a
    derivative reading them through ``[W x ptr]`` aggregates): garbage or NaN columns, right only
    while the stack happened to be zero (the first call)."""
    rng = np.random.default_rng(20)
    w, x = rng.normal(size=(64, 64)) / 8.0, rng.normal(size=64)
    want = np.asarray(jax.hessian(lambda x_: jnp.sum(jnp.log1p(jnp.exp(w @ x_))) + 0.5 * jnp.sum(x_ * x_))(x))
    for _ in range(3):
        np.testing.assert_allclose(pyjlad.hessian(softplus_loss, x, w, chunk=chunk), want, rtol=1e-11, atol=1e-13)


def test_vector_drivers_give_enzyme_a_module_without_argmemonly() -> None:
    """Why the wide Hessian above is right: no derivative of a vector sweep inherits ``argmemonly``."""
    exported = export(softplus_loss, numba_argtypes((np.zeros(3), np.zeros((2, 3)))))
    text = exported.enzyme_module.text
    assert "argmemonly" in text  # Numba's optimizer found its memory accesses all go through its arguments
    for driver in (vector_driver(exported.abi, "forward", (Activity.DUP, Activity.CONST), 4),
                   vector_hvp_driver(exported.abi, 0, 4)):
        assert "argmemonly" not in driver.module(text)
