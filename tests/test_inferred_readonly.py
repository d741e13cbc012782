"""Which arrays a function writes, as LLVM proves it on the portable module (:mod:`pyjlad.inferred_readonly`).

An array passed to NumPy's BLAS-backed products (``@``, ``np.dot``) was taken for written, because Numba's
IR calls its BLAS helpers as external functions: a function returning nothing then had its output taken to be
the matrix (``out[:] = a @ x``: the Jacobian all zeros), and a constant array used in a product got a zeroed
shadow and a derivative nobody asked for. Checked here: the inference on small modules (sound where a
pointer reaches an undeclared function or a store), what the ABI says for each BLAS product, and the
derivatives of functions that write their result through a product, against hand-derived formulas and JAX
(float64), the caller's arrays unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit, typeof

import pyjlad
from pyjlad.export import export
from pyjlad.inferred_readonly import readonly_parameters

jax = pytest.importorskip("jax")
jnp = jax.numpy
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261201)

_HELPER = """declare void @use(ptr nocapture readonly)
declare void @unknown(ptr)
define linkonce_odr void @helper(ptr %p) {
  call void @use(ptr %p)
  ret void
}
"""


@pytest.mark.parametrize(("body", "expected"), [
    ("call void @helper(ptr %a)\n  store double 1.0, ptr %b", ["%a"]),  # read through a linkonce_odr helper
    ("call void @unknown(ptr %a)\n  call void @use(ptr %b)", ["%b"]),  # an undeclared callee may write
    ("store double 1.0, ptr %a\n  %v = load double, ptr %b", ["%b"]),
    ("%v = load double, ptr %a\n  call void @helper(ptr %b)", ["%a", "%b"]),
])
def test_inference_follows_declarations_and_linkonce_odr_bodies(body, expected) -> None:
    text = _HELPER + f"define void @f(ptr %a, ptr %b) {{\n  {body}\n  ret void\n}}\n"
    assert sorted(readonly_parameters(text, "f")) == expected


def test_an_unreadable_module_proves_nothing() -> None:
    assert readonly_parameters("define void @f(ptr %a) {\n  bogus\n}\n", "f") == frozenset()
    assert readonly_parameters(_HELPER, "absent") == frozenset()


@njit
def _matvec_loss(w, x):
    return np.sum(np.tanh(w @ x))


@njit
def _matmul_loss(a, b):
    return np.sum(np.sin(a @ b))


@njit
def _dot_loss(x, y):
    return np.tanh(np.dot(x, y))


@njit
def _per_sample(w, x):
    s = 0.0
    for i in range(x.shape[0]):
        z = w @ x[i]
        s += np.max(z) + np.sum(z * z)
    return s


def _writes(f, *args) -> list[bool]:
    return [arg.writes for arg in export(f, [typeof(a) for a in args]).abi.args]


@pytest.mark.parametrize(("f", "shapes"), [
    (_matvec_loss, [(3, 4), (4,)]),  # gemv
    (_matmul_loss, [(3, 4), (4, 2)]),  # gemm
    (_dot_loss, [(5,), (5,)]),  # dot
    (_per_sample, [(3, 4), (6, 4)]),  # gemv of a row view, per sample
])
def test_arrays_only_read_by_blas_products_are_not_written(f, shapes) -> None:
    assert _writes(f, *[RNG.normal(size=s) for s in shapes]) == [False, False]


@njit
def _product_into(a, x, out):
    out[:] = a @ x


@njit
def _scaled_product_into(a, x, out):
    y = a @ x
    for i in range(out.shape[0]):
        out[i] = np.sin(y[i]) * x[i % x.shape[0]]


def test_the_written_output_stays_written() -> None:
    a, x, out = RNG.normal(size=(2, 3)), RNG.normal(size=3), np.zeros(2)
    assert _writes(_product_into, a, x, out) == [False, False, True]


def test_the_jacobian_of_a_product_written_into_an_argument_is_the_matrix() -> None:
    """Seeded through ``out``, not through ``a`` (before: the Jacobian of ``a``, all zeros)."""
    a, x, out = RNG.normal(size=(2, 3)), RNG.normal(size=3), np.zeros(2)
    copies = a.copy(), x.copy()
    np.testing.assert_array_equal(pyjlad.jacobian(_product_into, a, x, out, wrt=1), copies[0])
    np.testing.assert_array_equal(a, copies[0])
    np.testing.assert_array_equal(x, copies[1])


@pytest.mark.parametrize("wrt", [0, 1])
def test_vjp_through_a_written_output_matches_jax(wrt) -> None:
    a, x, out = RNG.normal(size=(3, 4)), RNG.normal(size=4), np.zeros(3)
    ct = RNG.normal(size=3)
    copies = a.copy(), x.copy(), ct.copy()

    def f_jax(a_, x_):
        return jnp.sin(a_ @ x_) * x_[jnp.arange(3) % 4]

    _, pullback = jax.vjp(f_jax, *[jnp.asarray(c) for c in copies[:2]])
    expected = pullback(jnp.asarray(copies[2]))[wrt]
    _, cotangents = pyjlad.vjp(_scaled_product_into, (a, x, out), ct)
    np.testing.assert_allclose(cotangents[wrt], np.asarray(expected), rtol=1e-12, atol=1e-14)
    for given, before in zip((a, x, ct), copies, strict=True):
        np.testing.assert_array_equal(given, before)


def test_gradient_with_a_constant_matrix_in_a_product_per_sample_matches_jax() -> None:
    """``x`` constant and only read: no shadow of it, the gradient with respect to ``w`` as before."""
    w, x = RNG.normal(size=(5, 4)), RNG.normal(size=(7, 4))
    copies = w.copy(), x.copy()

    def f_jax(w_, x_):
        z = x_ @ w_.T
        return jnp.sum(jnp.max(z, axis=1)) + jnp.sum(z * z)

    expected = jax.grad(f_jax)(*[jnp.asarray(c) for c in copies])
    np.testing.assert_allclose(pyjlad.grad(_per_sample)(w, x), np.asarray(expected), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(w, copies[0])
    np.testing.assert_array_equal(x, copies[1])
