"""Time-stepping stencils with swapped buffers: gradients against JAX, and the size of Enzyme's tape (issue 20).

The tape is measured as the benchmark suite measures it: pyjlad's block pool keeps every block of
64 KiB or more a gradient call frees (each counted as its power-of-two size), so after emptying it,
one call leaves its tape there. The sizes below are chosen so one state per step is a power of two.
What the reverse sweep cannot do without: kappa's adjoint needs every step's Laplacian (one grid per
step). Before the fix, the stencil's inner loop was unswitched on ``i > 0`` and Enzyme kept a tape
per copy (two grids per step); Numba's ``x ** 2`` was a two-round loop whose every value was kept.
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.engines import pool

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

ALPHA = 0.2
RNG = np.random.default_rng(2026_11_28)


@njit
def heat_1d(u0, kappa, steps):
    n = u0.shape[0]
    u = u0.copy()
    v = np.empty_like(u)
    for _ in range(steps):
        for i in range(n):
            left = u[i - 1] if i > 0 else 0.0
            right = u[i + 1] if i < n - 1 else 0.0
            v[i] = u[i] + ALPHA * kappa * (left + right - 2.0 * u[i])
        u, v = v, u
    return np.sum(u * u)


@njit
def heat_2d(u0, kappa, steps):
    n, m = u0.shape
    u = u0.copy()
    v = np.empty_like(u)
    for _ in range(steps):
        for i in range(n):
            for j in range(m):
                up = u[i - 1, j] if i > 0 else 0.0
                down = u[i + 1, j] if i < n - 1 else 0.0
                left = u[i, j - 1] if j > 0 else 0.0
                right = u[i, j + 1] if j < m - 1 else 0.0
                v[i, j] = u[i, j] + ALPHA * kappa * (up + down + left + right - 4.0 * u[i, j])
        u, v = v, u
    return np.sum(u * u)


@njit
def heat_2d_source(u0, kappa, source, steps):
    """Interior points only, a nonlinear source term, the result a weighted sum: a second stencil shape."""
    n, m = u0.shape
    u = u0.copy()
    v = u0.copy()
    for _ in range(steps):
        for i in range(1, n - 1):
            for j in range(1, m - 1):
                lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
                v[i, j] = u[i, j] + kappa * lap + source * np.sin(u[i, j])
        u, v = v, u
    s = 0.0
    for i in range(n):
        for j in range(m):
            s += (i + 1) * u[i, j] ** 2
    return s


def jax_heat_1d(u0, kappa, steps):
    def step(u, _):
        p = jnp.pad(u, 1)
        return u + ALPHA * kappa * (p[:-2] + p[2:] - 2.0 * u), None
    u, _ = jax.lax.scan(step, u0, None, length=steps)
    return jnp.sum(u * u)


def jax_heat_2d(u0, kappa, steps):
    def step(u, _):
        p = jnp.pad(u, 1)
        lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
        return u + ALPHA * kappa * lap, None
    u, _ = jax.lax.scan(step, u0, None, length=steps)
    return jnp.sum(u * u)


def jax_heat_2d_source(u0, kappa, source, steps):
    def step(u, _):
        c = u[1:-1, 1:-1]
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c
        return u.at[1:-1, 1:-1].set(c + kappa * lap + source * jnp.sin(c)), None
    u, _ = jax.lax.scan(step, u0, None, length=steps)
    weights = jnp.arange(1, u.shape[0] + 1, dtype=u.dtype)[:, None]
    return jnp.sum(weights * u * u)


def _check(f, jf, args, wrt):
    before = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in args]
    expected = jax.grad(jf, argnums=wrt)(*[jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in before[:-1]],
                                         before[-1])
    got = pyjlad.gradient(f, *args, wrt=wrt)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-10, atol=1e-12)
    for a, b in zip(args, before, strict=True):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("steps", [1, 2, 7])
def test_heat_1d_matches_jax(steps) -> None:
    _check(heat_1d, jax_heat_1d, (RNG.uniform(0, 1, 33), 0.9, steps), (0, 1))


@pytest.mark.parametrize(("shape", "steps"), [((6, 6), 3), ((9, 5), 4), ((1, 7), 2)])
def test_heat_2d_matches_jax(shape, steps) -> None:
    _check(heat_2d, jax_heat_2d, (RNG.uniform(0, 1, shape), 1.1, steps), (0, 1))


def test_heat_2d_with_source_matches_jax() -> None:
    _check(heat_2d_source, jax_heat_2d_source, (RNG.uniform(0, 1, (8, 7)), 0.15, 0.3, 5), (0, 1, 2))


def _tape_bytes(f, *args, wrt) -> int:
    """Bytes of the blocks of 64 KiB or more one warmed gradient call of ``f`` allocates (and frees)."""
    df = pyjlad.grad(f, wrt=wrt)
    return pool.kept_by(lambda: df(*args))


@pytest.fixture()
def pooled():
    if pool.capacity() < 1 << 24:
        pytest.skip("PYJLAD_POOL_BYTES keeps fewer blocks than these tapes")
    yield


def test_heat_2d_tape_is_one_grid_per_step(pooled) -> None:
    n, steps = 32, 16  # one grid is 8 KiB (below the pool's 64 KiB), one per step 128 KiB
    kept = _tape_bytes(heat_2d, RNG.uniform(0, 1, (n, n)), 1.0, steps, wrt=(0, 1))
    assert kept == n * n * 8 * steps


def test_heat_1d_tape_is_one_grid_per_step(pooled) -> None:
    n, steps = 1024, 16
    kept = _tape_bytes(heat_1d, RNG.uniform(0, 1, n), 1.0, steps, wrt=(0, 1))
    assert kept == n * 8 * steps


@njit
def squares_loop(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def test_integer_powers_keep_no_tape(pooled) -> None:
    """``x ** 2`` over a read-only array: everything the reverse sweep needs is recomputed from ``x``."""
    x = RNG.uniform(-1, 1, 100_000)
    before = x.copy()
    assert _tape_bytes(squares_loop, x, wrt=0) == 0
    g = pyjlad.gradient(squares_loop, x)
    expected = np.zeros_like(before)
    r = before[1:] - before[:-1] ** 2
    expected[:-1] += -400.0 * before[:-1] * r - 2.0 * (1.0 - before[:-1])
    expected[1:] += 200.0 * r
    np.testing.assert_allclose(g, expected, rtol=1e-12, atol=1e-9)
    np.testing.assert_array_equal(x, before)


@njit
def broadcast_product(a, b):
    return np.sum(np.sin(a * b) * a)


def jax_broadcast_product(a, b):
    return jnp.sum(jnp.sin(a * b) * a)


@pytest.mark.parametrize(("shape_a", "shape_b"), [((5, 4), (1, 4)), ((5, 1), (1, 4)), ((5, 4), (5, 4)),
                                                  ((1, 4), (5, 4)), ((2, 3, 4), (1, 3, 1)), ((6,), (1,))])
def test_broadcast_expressions_match_jax(shape_a, shape_b) -> None:
    """Numba's array expressions index a broadcast axis with 0 (Enzyme's copy computes it with a ``select``)."""
    a, b = RNG.uniform(-1, 1, shape_a), RNG.uniform(-1, 1, shape_b)
    a0, b0 = a.copy(), b.copy()
    got = pyjlad.gradient(broadcast_product, a, b, wrt=(0, 1))
    expected = jax.grad(jax_broadcast_product, argnums=(0, 1))(jnp.asarray(a0), jnp.asarray(b0))
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_broadcast_indices_are_not_cached(pooled) -> None:
    """The tape of ``sum(sin(a * b) * a)``, ``a`` 256x256 and ``b`` one row: the temporaries and their shadows
    (each a grid and a 48-byte header: two grids as the pool counts it) and the values of one temporary, no
    element indices (four more grids when Numba's index updates were loop-carried values)."""
    n = 256
    grid = n * n * 8
    kept = _tape_bytes(broadcast_product, RNG.uniform(-1, 1, (n, n)), RNG.uniform(-1, 1, (1, n)), wrt=(0, 1))
    assert kept <= 6 * grid
