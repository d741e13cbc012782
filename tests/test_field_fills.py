"""Numba's zero fill of an array struct on the stack (a column ``X[:, j]`` viewed as 1-D inside ``np.max``), which
Enzyme v0.0.289 cannot type where nothing reads the zeroed fields back: written as stores of the struct's fields
(:mod:`pyjlad.ir.field_fills`).

Until 2026-12-06 such a loss needed loose types and the derivative failed pyjlad's check: ``np.std(X) + np.var(X[:,
1])`` plus the column maxima built by a list comprehension was refused (a user-style probe). Each loss here is
checked against JAX (float64) from copies taken before the call, with the caller's array unchanged, and the
gradients are built with Enzyme's strict types (no ``-enzyme-loose-types`` among the options logged).
"""

from __future__ import annotations

import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)

X = np.random.default_rng(3).normal(size=(6, 3))


@njit
def spread_and_maxima(X):
    s = np.std(X) + np.var(X[:, 1])
    mx = np.array([X[:, j].max() for j in range(X.shape[1])])
    return s + np.sum(mx)


@njit
def column_extremes(X):
    total = np.var(X)
    for j in range(X.shape[1]):
        total += X[:, j].max() - 0.5 * X[:, j].min()
    return total


@njit
def maxima_appended(X):
    peaks = []
    for j in range(X.shape[1]):
        peaks.append(np.max(X[:, j]))
    return np.std(X) + np.sum(np.array(peaks) ** 2)


CASES = {
    "std_var_listcomp_maxima": (spread_and_maxima,
                                lambda X: jnp.std(X) + jnp.var(X[:, 1]) + jnp.sum(X.max(0))),
    "column_max_and_min": (column_extremes, lambda X: jnp.var(X) + jnp.sum(X.max(0) - 0.5 * X.min(0))),
    "maxima_appended": (maxima_appended, lambda X: jnp.std(X) + jnp.sum(X.max(0) ** 2)),
}


@pytest.mark.parametrize("f, twin", CASES.values(), ids=CASES.keys())
def test_gradient_of_column_maxima_against_jax(f, twin, caplog, monkeypatch):
    monkeypatch.setenv("PYJLAD_DISABLE_DISK_CACHE", "1")  # so that Enzyme runs, and its attempts are logged
    x = X.copy()
    expected = np.asarray(jax.grad(twin)(jnp.asarray(X)))
    with caplog.at_level(logging.DEBUG, logger="pyjlad"):
        got = pyjlad.gradient(f, x)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-14)
    assert x.tobytes() == X.tobytes()
    assert [r for r in caplog.records if "Enzyme on" in r.getMessage()]
    assert not [r for r in caplog.records if "loose" in r.getMessage()]


def test_hessian_and_jvp_of_the_probes_loss_against_jax():
    f, twin = CASES["std_var_listcomp_maxima"]
    x = X.copy()
    tangent = np.linspace(-1.0, 1.0, X.size).reshape(X.shape)
    _, got = pyjlad.jvp(f, (x,), (tangent,))
    _, expected = jax.jvp(twin, (jnp.asarray(X),), (jnp.asarray(tangent),))
    np.testing.assert_allclose(got, float(expected), rtol=1e-12)
    hessian = pyjlad.hessian(f, x)
    np.testing.assert_allclose(hessian, np.asarray(jax.hessian(twin)(jnp.asarray(X))), rtol=1e-10, atol=1e-12)
    assert x.tobytes() == X.tobytes()
