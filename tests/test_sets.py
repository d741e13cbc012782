"""Sets inside a differentiated function (``set()``, ``add``, ``in``, ``sorted(set(...))``), against JAX in float64.

Numba grows a set's table with ``NRT_MemInfo_varsize_alloc`` and releases the old one with
``NRT_MemInfo_varsize_free``; until 2026-12-06 pyjlad's runtime defined neither, so every function with a set was
refused (and with it ``np.transpose(x, axes)``, ``np.swapaxes``, ``np.rot90``: ``tests/test_views_more.py``).
pyjlad's runtime now grows a set's table in a block of its own (``pyjlad/runtime/nrt.ll``), and Numba's hashing is
inactive for Enzyme (a NaN's hash draws on Numba's random state). Sets of integers (indices, labels) are what a
differentiated function holds in practice; each set here grows past its first table (8 slots). Every derivative is
compared with JAX's, computed from copies taken before the call; the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261206)
X = RNG.standard_normal(30)
INDEX = RNG.integers(0, 30, 200)


@njit
def first_visits(x, index):
    seen = set()
    total = 0.0
    for i in index:
        if i not in seen:
            seen.add(i)
            total += np.sin(x[i]) * len(seen)
    return total


def first_visits_jax(x, index):
    seen, total = [], 0.0
    for i in index.tolist():
        if i not in seen:
            seen.append(i)
            total = total + jnp.sin(x[i]) * len(seen)
    return total


@njit
def class_means(x, labels):
    total = 0.0
    for c in sorted(set(labels)):
        mean, count = 0.0, 0
        for k in range(labels.size):
            if labels[k] == c:
                mean += x[k % x.size]
                count += 1
        total += (mean / count) ** 2
    return total


def class_means_jax(x, labels):
    total = 0.0
    for c in sorted(set(labels.tolist())):
        chosen = np.array([k % x.size for k in range(labels.size) if labels[k] == c])
        total = total + (jnp.sum(x[chosen]) / chosen.size) ** 2
    return total


@pytest.mark.parametrize("f, f_jax", [(first_visits, first_visits_jax), (class_means, class_means_jax)],
                         ids=["first_visits", "class_means"])
def test_gradient_and_jvp_through_a_set(f, f_jax):
    x, index = X.copy(), INDEX.copy()
    before, index_before = x.copy(), index.copy()
    expected = jax.grad(f_jax)(jnp.asarray(before), index_before)
    np.testing.assert_allclose(pyjlad.gradient(f, x, index, wrt=0), np.asarray(expected), rtol=1e-12, atol=1e-12)
    tangent = np.linspace(-1.0, 1.0, x.size)
    value, jvp = pyjlad.jvp(f, (x, index), (tangent, None))
    want_value, want_jvp = jax.jvp(lambda x: f_jax(x, index_before), (jnp.asarray(before),), (jnp.asarray(tangent),))
    np.testing.assert_allclose(jvp, float(want_jvp), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value, float(want_value), rtol=1e-12)
    assert x.tobytes() == before.tobytes() and index.tobytes() == index_before.tobytes()
