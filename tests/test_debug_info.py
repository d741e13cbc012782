"""Functions Numba compiles with debug information (``@njit(debug=True)``, ``NUMBA_DEBUGINFO=1``) differentiate.

Numba attaches ``!dbg`` metadata to every function and instruction of such a module; the exported module
drops metadata, and before, the attachment on each ``define`` line stayed behind and ``opt`` refused the
module ("use of undefined metadata"), reported as a defect of pyjlad. Oracles: closed forms and JAX (float64),
computed from copies taken before the call.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from numba import njit, prange

import pyjlad
from pyjlad.errors import ParallelFallbackWarning


@njit(debug=True)
def _square(v):
    return v * v


@njit(debug=True)
def energy(x, w):
    out = np.empty_like(x)  # an allocation (Numba's runtime)
    for i in range(x.shape[0]):
        out[i] = _square(np.sin(w * x[i]))  # a call into another debug=True function
    return out.sum()


@njit(debug=True)
def layer(w, x):
    return np.tanh(w @ x)


def test_gradient_and_jvp_closed_form():
    x, w = np.linspace(-1.0, 1.0, 7), 0.7
    x0 = x.copy()
    gx, gw = pyjlad.grad(energy, wrt=(0, 1))(x, w)
    np.testing.assert_array_equal(x, x0)
    s, c = np.sin(w * x0), np.cos(w * x0)
    np.testing.assert_allclose(gx, 2 * s * c * w, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gw, np.sum(2 * s * c * x0), rtol=1e-13)
    t = np.linspace(0.5, 1.5, 7)
    _, tangent = pyjlad.jvp(energy, (x, w), (t, 0.0))
    np.testing.assert_allclose(tangent, np.sum(2 * s * c * w * t), rtol=1e-13)


@pytest.mark.parametrize("mode", ["forward", "reverse"])
def test_jacobian_in_vector_mode_against_jax(mode):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(3)
    w, x = rng.normal(size=(5, 4)), rng.normal(size=4)
    w0, x0 = w.copy(), x.copy()
    got = pyjlad.jacobian(layer, w, x, wrt=1, mode=mode, chunk=2)
    want = jax.jacfwd(lambda v: jax.numpy.tanh(w0 @ v))(x0)
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(w, w0)
    np.testing.assert_array_equal(x, x0)


@njit(debug=True, parallel=True)
def parallel_energy(x, s):
    e = 0.0
    for i in prange(x.shape[0]):
        e += np.sin(x[i]) * s[i % s.shape[0]]
    return e


@pytest.mark.usefixtures("parallel_two_threads")
def test_parallel_derivative_of_debug_function_runs_in_parallel():
    """Before, the OpenMP rewrite did not recognize loops whose calls carry ``!dbg``: the serial derivative
    ran, with a ParallelFallbackWarning."""
    rng = np.random.default_rng(4)
    x, s = rng.normal(size=301), rng.normal(size=7)
    x0, s0 = x.copy(), s.copy()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ParallelFallbackWarning)
        gx, gs = pyjlad.grad(parallel_energy, wrt=(0, 1))(x, s)
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(s, s0)
    idx = np.arange(301) % 7
    np.testing.assert_allclose(gx, np.cos(x0) * s0[idx], rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(gs, np.bincount(idx, weights=np.sin(x0), minlength=7), rtol=1e-12, atol=1e-14)
