"""Hessian-vector products of ``prange`` code differentiate the parallel module (issue 17).

Reverse over forward: Enzyme's reverse sweep over the forward form of the parallel module (the fork's
registered forward derivative), so the product's loops run on Numba's threads. Oracles: JAX float64
(``jvp`` of ``grad`` of a ``jax.numpy`` twin, from copies taken before the call) and the closed form of
seed 003's ``remote_stats`` loss; at 1 and 2 threads with a fallback to the serial derivative an error
(:func:`_in_parallel`); repeated products within rounding (adjoints of shared inputs are atomic adds).
"""

from __future__ import annotations

import warnings

import numba
import numpy as np
import pytest
from numba import njit, prange
from test_parallel_derivatives import CASES, THREADS, _in_parallel, remote_loss

import pyjlad
from pyjlad.errors import ParallelFallbackWarning
from pyjlad.export import export, numba_argtypes
from pyjlad.openmp import libomp_path

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.skipif(libomp_path() is None, reason="LLVM's OpenMP runtime (libomp5-15) is not installed")
rng = np.random.default_rng(23)

#: (case, argument) for every argument each case differentiates: the other arrays are constant in the product.
#: (The stencil's rows are split: more in tests/test_parallel_stencil_hvp.py.)
PRODUCTS = [(name, wrt) for name, (_, _, wrts, _) in CASES.items() for wrt in wrts]


def _jax_hvp(twin, args, wrt: int, v):
    """H v by JAX: the directional derivative of ``grad`` along ``v`` (a zero tangent for the other arguments)."""
    primals = tuple(jnp.asarray(a) for a in args)
    tangents = tuple(jnp.asarray(v) if i == wrt else jnp.zeros_like(p) for i, p in enumerate(primals))
    return np.asarray(jax.jvp(jax.grad(twin, argnums=wrt), primals, tangents)[1])


@pytest.mark.parametrize(("name", "wrt"), PRODUCTS)
def test_hvp_matches_jax_at_one_and_two_threads(parallel_on, name: str, wrt: int) -> None:
    f, make, _, twin = CASES[name]
    args = make()
    v = rng.normal(size=np.shape(args[wrt]))
    copies, v0 = [np.copy(a) for a in args], v.copy()
    expected = _jax_hvp(twin, copies, wrt, v0)
    module, why = export(f, numba_argtypes(args)).make_parallel_module("hvp")
    assert module is not None, why
    assert "@__kmpc_fork_call(" in module.text and "@pyjlad.omp.fork.0.fwd" in module.text
    if name == "pairwise O(n^2)":  # every row reads every x: each thread reads copies of x and of its tangent
        assert "%priv1.mem = call noalias ptr @malloc(" in module.text
        assert "%dpriv1.mem = call noalias ptr @malloc(" in module.text
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.hvp(f, args, v, wrt=wrt))
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
        for a, c in zip(args, copies):
            np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(v, v0)


def test_remote_stats_hvp_closed_form(parallel_on) -> None:
    """LAPACK's inverse in the loop's body. The loss is sum_k b_k^2 / (mse d_k) per voxel, d = diag(inv(V)):
    its Hessian with respect to mse is diagonal, 2 sum_k b_k^2 / d_k / mse^3."""
    mse = rng.uniform(0.5, 1.5, 300)
    x = rng.normal(size=(40, 8))
    v, b = x.T @ x, rng.normal(size=(300, 8))
    t = rng.normal(size=300)
    copies = (mse.copy(), v.copy(), b.copy(), t.copy())
    d = np.diag(np.linalg.inv(copies[1]))
    expected = 2.0 * np.sum(copies[2] ** 2 / d, axis=1) / copies[0] ** 3 * copies[3]
    for threads in THREADS:
        got = _in_parallel(threads, lambda: pyjlad.hvp(remote_loss, (mse, v, b), t, wrt=0))
        np.testing.assert_allclose(got, expected, rtol=1e-11)
        for a, c in zip((mse, v, b, t), copies):
            np.testing.assert_array_equal(a, c)


def test_repeated_products_within_rounding(parallel_on) -> None:
    """The pairwise kernel reads every x in every row: its adjoints are atomic adds, in any order."""
    f, make, _, _ = CASES["pairwise O(n^2)"]
    (x,) = make()
    v = rng.normal(size=x.shape)
    first = _in_parallel(2, lambda: pyjlad.hvp(f, (x,), v))
    for _ in range(15):
        np.testing.assert_allclose(pyjlad.hvp(f, (x,), v), first, rtol=1e-13, atol=1e-13 * np.abs(first).max())


@pyjlad.custom_derivative
@njit
def softplus(z):
    return np.log1p(np.exp(z))


@softplus.defvjp
@njit
def _softplus_vjp(z, g):
    return g / (1.0 + np.exp(-z))


@njit(parallel=True)
def softplus_sum(x):
    s = 0.0
    for i in prange(x.shape[0]):
        s += softplus(x[i]) * x[i]
    return s


def test_a_product_through_custom_rules_is_serial_with_a_warning(parallel_on) -> None:
    """Forward over reverse through the rule: Enzyme's forward mode cannot run over the reverse of a fork.
    d2/dx2 [x softplus(x)] = 2 s(x) + x s(x) (1 - s(x)), s the logistic function (the rule's derivative)."""
    numba.set_num_threads(2)
    x = rng.uniform(-2.0, 2.0, 200)
    t = rng.normal(size=200)
    x0, t0 = x.copy(), t.copy()
    s = 1.0 / (1.0 + np.exp(-x0))
    with pytest.warns(ParallelFallbackWarning, match="custom rules") as said:
        got = pyjlad.hvp(softplus_sum, (x,), t)
    assert {w.filename for w in said if issubclass(w.category, ParallelFallbackWarning)} == {__file__}  # the call
    np.testing.assert_allclose(got, (2.0 * s + x0 * s * (1.0 - s)) * t0, rtol=1e-12)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(t, t0)


def test_setting_off_products_are_serial_without_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYJLAD_PARALLEL_DERIVATIVES", "0")
    twin = njit(parallel=True)(CASES["reduction"][0].py_func)  # built here, with the setting off
    x, t = rng.uniform(-1.5, 1.5, 300), rng.normal(size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        got = pyjlad.hvp(twin, (x,), t)
    np.testing.assert_allclose(got, (2 * np.cos(x) - x * np.sin(x)) * t, rtol=1e-12, atol=1e-14)
