"""LAPACK calls in a ``prange`` loop: the parallel derivative adds into their adjoints plainly (each call's
arrays are its own), and the gradient stays exact.

``PYJLAD_PARALLEL_DERIVATIVES=1`` at 2 threads, against ``jax.grad`` of the batched twin (float64) computed
from copies taken before the call; the caller's arrays must come back unchanged.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba import njit, prange
from parallel_checks import parallel_grad

from pyjlad.private_bodies import plain_private_adds

pytestmark = pytest.mark.usefixtures("parallel_two_threads")


@njit(parallel=True)
def batched_linalg(a, b):
    e = 0.0
    for t in prange(a.shape[0]):
        x = np.linalg.solve(a[t], b[t])
        low = np.linalg.cholesky(a[t])
        e += np.sum(x * x) + np.linalg.det(a[t]) + np.sum(low) + np.sum(np.linalg.inv(a[t]) * b[t])
    return e


def _problem(count: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(count, n, n))
    return m @ m.transpose(0, 2, 1) + n * np.eye(n), rng.normal(size=(count, n))


def test_solve_cholesky_det_inv_against_jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy
    a, b = _problem(64, 5, 11)
    a0, b0 = a.copy(), b.copy()

    def one(ai, bi):
        x = jnp.linalg.solve(ai, bi)
        lower = jnp.tril(ai) + jnp.tril(ai, -1).T  # Numba's cholesky reads a's lower triangle only
        return jnp.sum(x * x) + jnp.linalg.det(ai) + jnp.sum(jnp.linalg.cholesky(lower)) + jnp.sum(
            jnp.linalg.inv(ai) * bi)

    want = jax.grad(lambda a, b: jnp.sum(jax.vmap(one)(a, b)), argnums=(0, 1))(a0, b0)
    got = parallel_grad(batched_linalg, (a, b), (0, 1))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-10, atol=1e-10)


def test_equal_run_to_run_at_every_thread_count():
    """Each call's adjoints are added into by its own thread only: the same gradient at every thread count."""
    a, b = _problem(301, 4, 12)
    first = parallel_grad(batched_linalg, (a, b), (0, 1))
    for threads in range(1, numba.config.NUMBA_NUM_THREADS + 1):
        numba.set_num_threads(threads)
        again = parallel_grad(batched_linalg, (a, b), (0, 1))
        for g, f in zip(again, first):
            np.testing.assert_array_equal(g, f)


def test_only_the_lapack_derivatives_adds_are_made_plain():
    text = "\n".join([
        "define internal void @diffepyjlad_lapack_numba_xgesv_d(ptr %a) {", "entry:",
        "  %0 = atomicrmw fadd ptr %a, double 2.0 monotonic, align 8", "  ret void", "}",
        "define internal void @diffeuser_callee(ptr %a) {", "entry:",
        "  %0 = atomicrmw fadd ptr %a, double 2.0 monotonic, align 8", "  ret void", "}", ""])
    out = plain_private_adds(text)
    assert out.count("atomicrmw fadd") == 1 and "@diffeuser_callee" in out.split("atomicrmw")[0]
