"""Sets inside a differentiated function (``set()``, ``add``, ``in``, ``sorted(set(...))``), against JAX in float64.

Numba grows a set's table with ``NRT_MemInfo_varsize_alloc`` and releases the old one with
``NRT_MemInfo_varsize_free``; until 2026-12-06 pyjlad's runtime defined neither, so every function with a set was
refused (and with it ``np.transpose(x, axes)``, ``np.swapaxes``, ``np.rot90``: ``tests/test_views_more.py``).
pyjlad's runtime now grows a set's table in a block of its own (``pyjlad/runtime/nrt.ll``), and Numba's hashing is
inactive for Enzyme (a NaN's hash draws on Numba's random state). Sets of integers (indices, labels) are what a
differentiated function holds in practice; each set here grows past its first table (8 slots). Every derivative is
compared with JAX's, computed from copies taken before the call; the caller's arrays are checked unchanged. The
programs are the corpus's (``tests/corpus/family_containers.py``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus.family_containers import class_means, class_means_jax, first_visits, first_visits_jax

import pyjlad

jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20261206)
X = RNG.standard_normal(40)
INDEX = RNG.integers(0, 40, 200)  # first_visits: up to 40 keys
LABELS = RNG.integers(0, 11, 40)  # class_means: one label per element of x


@pytest.mark.parametrize("f, f_jax, index", [(first_visits, first_visits_jax, INDEX),
                                              (class_means, class_means_jax, LABELS)],
                         ids=["first_visits", "class_means"])
def test_gradient_and_jvp_through_a_set(f, f_jax, index):
    x, index = X.copy(), index.copy()
    before, index_before = x.copy(), index.copy()
    expected = jax.grad(f_jax)(jnp.asarray(before), index_before)
    np.testing.assert_allclose(pyjlad.gradient(f, x, index, wrt=0), np.asarray(expected), rtol=1e-12, atol=1e-12)
    tangent = np.linspace(-1.0, 1.0, x.size)
    value, jvp = pyjlad.jvp(f, (x, index), (tangent, None))
    want_value, want_jvp = jax.jvp(lambda x: f_jax(x, index_before), (jnp.asarray(before),), (jnp.asarray(tangent),))
    np.testing.assert_allclose(jvp, float(want_jvp), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(value, float(want_value), rtol=1e-12)
    assert x.tobytes() == before.tobytes() and index.tobytes() == index_before.tobytes()
