"""Hessian-vector products of loops over constant data keep no copy of that data (issue 20: smaller tapes).

A Hessian-vector product is Enzyme's reverse sweep over the forward derivative it builds of the function
(:func:`pyjlad.engines.hvp_driver.hvp_driver`). That forward derivative used to write the result's tangent
through the shadow of Numba's result pointer, a parameter Enzyme gives no ``noalias``, after every read of
the inputs; the reverse sweep could then not tell that store from the inputs and kept a copy of every value
it read: the softmax classifier's product over 20,000 samples kept 136.75 MiB (a copy of ``x[i]`` per row of
weights, twice), 28 times the data. The entry's copy the products differentiate now returns its result
(:func:`pyjlad.engines.entry_status.result_by_value`), and nothing is kept per element read.

Each product is checked against ``jax.jvp(jax.grad(f))`` in float64 (from copies taken before the call),
its arguments unchanged, and its tape measured as the benchmark suite measures it (the block pool keeps the
blocks of 64 KiB or more one warmed call allocates): under half a copy of the constant data (two copies for
the classifier, which keeps its dot products per sample), a bound each product broke before. The kernels are benchmarks/hvp_tapes.py's (section ``hvp-tapes`` of RESULTS.md).
"""

from __future__ import annotations

import numpy as np
import pytest
from benchmark_modules import load

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(2026_12_02)


KERNELS = load("hvp_tapes.py")
TWINS = KERNELS.jax_twins(jnp, jax.nn)
CASES = list(TWINS)
#: The most each product may keep, as a fraction of the constant data it reads (8192 rows of 32 doubles, 2 MiB).
#: The classifier keeps its 20 dot products per sample (cheaper than computing them again; 2.25 MiB as the
#: pool counts it); the others keep nothing per element. Before: 68 MiB, 2.06 MiB and 6.06 MiB.
MOST_KEPT = {"classifier": 2.0, "least squares": 0.5, "exp features": 0.5}


@pytest.mark.parametrize("name", CASES)
def test_products_against_jax(name) -> None:
    f, args = KERNELS.cases(40, RNG)[name]
    jf = TWINS[name]
    v = RNG.normal(size=args[0].shape)
    before = [a.copy() for a in args]
    v0 = v.copy()
    _, expected = jax.jvp(jax.grad(lambda w: jf(w, *map(jnp.asarray, before[1:]))), (jnp.asarray(before[0]),),
                          (jnp.asarray(v0),))
    got = pyjlad.hvp(f, args, v)
    np.testing.assert_allclose(got, np.asarray(expected), rtol=1e-10, atol=1e-12)
    for a, b in zip(args, before, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(v, v0)


def test_float32_product_against_its_formula() -> None:
    """The entry's copy returns a float32 result by value too (the product is 2 a.T a v)."""
    _, (w, a, b) = KERNELS.cases(30, RNG, np.float32)["least squares"]
    v = RNG.normal(size=w.shape).astype(np.float32)
    expected = 2 * a.astype(np.float64).T @ (a.astype(np.float64) @ v.astype(np.float64))
    got = pyjlad.hvp(KERNELS.least_squares, (w, a, b), v)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


@pytest.mark.parametrize("name", CASES)
def test_products_keep_no_copy_of_the_data(name) -> None:
    f, args = KERNELS.cases(8192, RNG)[name]
    v = RNG.normal(size=args[0].shape)
    kept = KERNELS.hvp_tape_bytes(pyjlad.hvp_fn(f, 0), args, v)
    data = args[1].nbytes  # the constant array every element of which the product reads
    assert kept < MOST_KEPT[name] * data, f"the product of {name} keeps {kept} bytes, the data it reads is {data}"
