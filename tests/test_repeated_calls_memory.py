"""Repeated derivative calls give back the memory they take (glibc's in-use bytes, :mod:`heap_use`).

A derivative called many times (an optimizer's loop) must reach a steady state: whatever a call allocates,
the call itself or pyjlad's block pool gives back. Each program here allocates Numba arrays inside
the function (LAPACK's copies, pivots, temporaries); the growth over 200 more calls after a warm-up must stay
under 40 bytes per call (Python's own bookkeeping moves by less; a lost Numba array costs at least its
48-byte header).

``np.linalg.solve`` lost about 220 bytes per call, whatever the matrix's size: three stack slots of Numba's
``solve`` (the 72-byte result of ``numba_attempt_nocopy_reshape`` and two 8-byte ones) that Enzyme v0.0.289
moved to the heap for a tape no reverse function reads (:mod:`pyjlad.unread_tape_slots`). Gradients through
``np.percentile``/``np.quantile`` lost 80 bytes per call the same way: a zeroed copy of a result slot inserted into
a tape returned by value.

The forward derivatives of a reverse sweep (``hessian`` in vector mode, ``jacobian(mode="forward")`` of a function
calling a ``pyjlad.grad`` object) lost every block the function allocated, with its shadow and their tangents, on
every call (:mod:`pyjlad.forward_over_reverse`; about 1 MB per call at 100 inputs), and, through ``np.vstack``,
complex ``np.exp``, ``np.clip`` or a running maximum, caches their loops keep (:mod:`pyjlad.dropped_cache_frees`). Their values are
checked against JAX too.
"""

from __future__ import annotations

import numpy as np
import pytest
from heap_use import growth_over
from numba import njit, prange

import pyjlad

CALLS = 200


@njit
def log_det(a, x):
    return np.log(np.linalg.det(a @ a.T + np.diag(x * x)))


@njit
def solve_sum(a, x):
    return np.sum(np.linalg.solve(a @ a.T + np.eye(a.shape[0]), x))


@njit
def inverse_sum(a, x):
    return np.sum(np.linalg.inv(a @ a.T + np.eye(a.shape[0])) @ x)


@njit
def product_sum(a, x):
    return np.sum((a @ a.T) @ x)


@njit
def temporaries_in_a_loop(a, x):
    total = 0.0
    for i in range(a.shape[0]):
        row = a[i] * x
        total += np.sum(np.exp(row - row.max()))
    return total


@pytest.mark.parametrize("func, transform", [
    (log_det, "gradient"),
    (inverse_sum, "gradient"),
    (inverse_sum, "hvp"),
    (product_sum, "gradient"),
    (temporaries_in_a_loop, "gradient"),
    (temporaries_in_a_loop, "hvp"),
    (solve_sum, "gradient"),
    (solve_sum, "hvp"),
], ids=lambda v: getattr(v, "__name__", v))
def test_repeated_calls_reach_a_steady_state(func, transform) -> None:
    rng = np.random.default_rng(0)
    a, x = rng.normal(size=(6, 6)), rng.normal(size=6)
    if transform == "gradient":
        call = pyjlad.grad(func, wrt=0)
        grown = growth_over(lambda: call(a, x), warm=3, repeats=CALLS)
    else:
        v = rng.normal(size=a.shape)
        grown = growth_over(lambda: pyjlad.hvp(func, (a, x), v, wrt=0), warm=3, repeats=CALLS)
    assert grown < 40 * CALLS, f"{grown / CALLS:.0f} bytes more in use per call over {CALLS} calls"


@njit
def with_temporaries(x):
    b = np.zeros(x.size)
    c = x * 2.0
    for i in range(x.size):
        b[i] = x[i] * c[i]
    return np.sum(b * x) + np.sum(np.sin(c))


def _allocating_per_iteration(x):
    out = np.zeros(x.size)
    for i in prange(x.size):  # a range, but under parallel=True
        t = np.empty(3)
        t[0] = x[i]
        t[1] = x[i] * x[i]
        t[2] = np.sin(x[i])
        out[i] = t[0] * t[1] + t[2]
    return np.sum(out * out)


allocating_per_iteration = njit(_allocating_per_iteration)
allocating_per_parallel_iteration = njit(parallel=True)(_allocating_per_iteration)


@njit
def stacked_rows(x):
    m = np.vstack((x, x * x))
    return np.sum(m * m)


@njit
def complex_phase(x):
    z = np.exp(1j * x) * (1.0 + x)
    return np.sum(np.abs(z) ** 2 + z.real * x)


@njit
def clipped_cubes(x):
    return np.sum(np.clip(x, 0.2, 0.8) ** 2 * x)


@njit
def running_max_scaled(x):
    m = x[0]
    for v in x:
        if v > m:
            m = v
    return m * np.sum(x * x)


def _clipped_cubes_jax(x):
    import jax.numpy as jnp
    return jnp.sum(jnp.clip(x, 0.2, 0.8) ** 2 * x)


def _running_max_scaled_jax(x):
    import jax.numpy as jnp
    return jnp.max(x) * jnp.sum(x * x)


def _stacked_rows_jax(x):
    import jax.numpy as jnp
    return jnp.sum(x * x) + jnp.sum(x ** 4)


def _complex_phase_jax(x):
    import jax.numpy as jnp
    return jnp.sum((1.0 + x) ** 2 + jnp.cos(x) * (1.0 + x) * x)


def _with_temporaries_jax(x):
    import jax.numpy as jnp
    c = x * 2.0
    return jnp.sum(x * c * x) + jnp.sum(jnp.sin(c))


def _allocating_per_iteration_jax(x):
    import jax.numpy as jnp
    return jnp.sum((x * x * x + jnp.sin(x)) ** 2)


@njit
def _penalized(x):
    b = np.sin(x) * x
    return np.sum(b * b)


_penalty_gradient = pyjlad.grad(_penalized)


@njit
def gradient_penalty(x):
    g = _penalty_gradient(x)
    return g * g + x


def _gradient_penalty_jax(x):
    import jax
    import jax.numpy as jnp
    g = jax.grad(lambda y: jnp.sum((jnp.sin(y) * y) ** 2))(x)
    return g * g + x


def _jax():
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    return jax


def _right_then_steady(call, expected, *inputs) -> None:
    """``call()`` gives ``expected`` (JAX's, from copies taken before), then reaches a steady state over
    :data:`CALLS` more calls, the ``inputs`` unchanged."""
    before = [a.copy() for a in inputs]
    np.testing.assert_allclose(call(), expected, rtol=1e-10, atol=1e-12)
    grown = growth_over(call, warm=3, repeats=CALLS)
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)
    assert grown < 40 * CALLS, f"{grown / CALLS:.0f} bytes more in use per call over {CALLS} calls"


@pytest.mark.parametrize("func, oracle", [
    (with_temporaries, _with_temporaries_jax),
    (allocating_per_iteration, _allocating_per_iteration_jax),
    (allocating_per_parallel_iteration, _allocating_per_iteration_jax),
    # Loops whose reverse replays which way a branch went, and a loop LLVM vectorized (np.clip): the frees of their
    # caches, dropped by Enzyme in this forward derivative, put back (pyjlad.dropped_cache_frees; 160 to 580 bytes
    # per call lost before).
    (stacked_rows, _stacked_rows_jax),
    (complex_phase, _complex_phase_jax),
    (clipped_cubes, _clipped_cubes_jax),
    (running_max_scaled, _running_max_scaled_jax),
], ids=["temporaries", "per_iteration", "per_parallel_iteration", "vstack", "complex_exp", "clip", "running_max"])
def test_vector_mode_hessians_give_back_what_the_function_allocates(func, oracle) -> None:
    # A Hessian in vector mode (chunk 4: several sweeps per call) is Enzyme's forward derivative of the gradient.
    x = np.linspace(0.1, 1.0, 12)
    expected = np.asarray(_jax().hessian(oracle)(x.copy()))
    _right_then_steady(lambda: pyjlad.hessian(func, x, chunk=4), expected, x)


def test_forward_jacobians_of_a_gradient_penalty_give_back_what_it_allocates() -> None:
    # jacobian(mode="forward") in vector mode of a function calling a pyjlad.grad object: a forward derivative of
    # the gradient's reverse sweep.
    x = np.linspace(0.1, 1.0, 12)
    expected = np.asarray(_jax().jacfwd(_gradient_penalty_jax)(x.copy()))
    _right_then_steady(lambda: pyjlad.jacobian(gradient_penalty, x, mode="forward", chunk=4), expected, x)


@njit
def percentile_loss(x):
    return np.percentile(x, 30.0) + np.sum(x * x)


@njit
def quantile_loss(x):
    return np.quantile(x, 0.7) * np.sum(x)


@pytest.mark.parametrize("func, oracle", [
    (percentile_loss, lambda jnp, y: jnp.percentile(y, 30.0) + jnp.sum(y * y)),
    (quantile_loss, lambda jnp, y: jnp.quantile(y, 0.7) * jnp.sum(y)),
], ids=["percentile", "quantile"])
def test_gradients_through_percentiles_give_back_what_they_allocate(func, oracle) -> None:
    # Enzyme moved the result slot of Numba's _collect_percentiles_inner to the heap (a zeroed block inserted into
    # a tape returned by value, which no reverse pass reads) and nothing freed it: 80 bytes lost per call.
    import jax.numpy as jnp
    x = np.random.default_rng(0).normal(size=50)
    expected = np.asarray(_jax().grad(lambda y: oracle(jnp, y))(x.copy()))
    gradient = pyjlad.grad(func)
    _right_then_steady(lambda: gradient(x), expected, x)


@njit
def list_of_arrays(x):
    rows = []
    for i in range(3):
        rows.append(x * (i + 1.0))
    total = 0.0
    for r in rows:
        total += np.sum(r * r * r)
    return total


@njit
def many_rows(x):
    rows = []
    for i in range(20):  # the list's buffer grown several times
        rows.append(np.sin(x * (i + 1.0)))
    total = 0.0
    for r in rows:
        total += np.sum(r * r)
    return total


def _many_rows_jax(x):
    import jax.numpy as jnp
    return sum(jnp.sum(jnp.sin(x * (i + 1.0)) ** 2) for i in range(20))


def _list_of_arrays_jax(x):
    return sum(((x * (i + 1.0)) ** 3).sum() for i in range(3))


@pytest.mark.parametrize("func, oracle, chunk", [
    (list_of_arrays, _list_of_arrays_jax, 4),
    (many_rows, _many_rows_jax, 2),
], ids=["three_rows", "twenty_rows"])
def test_vector_mode_hessian_of_a_list_of_arrays_gives_back_what_it_allocates(func, oracle, chunk) -> None:
    # The forward derivative of the list growth's reverse pass dropped the frees of the list's buffers: 31,200 and
    # 111,744 bytes lost per call until 2026-12-07 (pyjlad.forward_tape_frees).
    x = np.linspace(0.1, 1.0, 12)
    expected = np.asarray(_jax().hessian(oracle)(x.copy()))
    _right_then_steady(lambda: pyjlad.hessian(func, x, chunk=chunk), expected, x)


@njit
def _checked_square_sum(x):
    if x[0] < 0:
        raise ValueError("x[0] must not be negative")
    total = 0.0
    for i in range(x.size):
        total += x[i] * x[i] * np.sin(x[i])
    return total


_checked_gradient = pyjlad.grad(_checked_square_sum)


@njit
def _gradient_inside(x):
    return _checked_gradient(x)


@njit
def _plain_inside(x):
    return _checked_square_sum(x)


def _swallowing(call, x):
    def run():
        with pytest.raises(ValueError, match="must not be negative"):
            call(x)
    return run


def test_a_derivative_called_from_njit_that_stops_at_an_exception_gives_back_its_gradient() -> None:
    # Numba itself keeps a small block per exception raised in compiled code (the plain call measures it); the
    # derivative lost its gradient array (8 bytes per element) on top of that until 2026-12-06.
    x = np.linspace(0.5, 1.5, 4096)
    x[0] = -1.0
    before = x.copy()
    plain = growth_over(_swallowing(_plain_inside, x), warm=3, repeats=CALLS)
    derivative = growth_over(_swallowing(_gradient_inside, x), warm=3, repeats=CALLS)
    np.testing.assert_array_equal(x, before)
    assert derivative - plain < 40 * CALLS, f"{(derivative - plain) / CALLS:.0f} bytes more per call than Numba's own"
    x[0] = 1.0
    expected = 2 * x * np.sin(x) + x * x * np.cos(x)
    np.testing.assert_allclose(_gradient_inside(x), expected, rtol=1e-12, atol=1e-14)


@njit(parallel=True)
def parallel_sum(x):
    total = 0.0
    for i in prange(x.size):
        total += (x[i] * x[i] * x[i] + np.sin(x[i])) ** 2
    return total


@pytest.mark.parametrize("func", [allocating_per_parallel_iteration, parallel_sum], ids=["allocating", "reduction"])
def test_hessian_vector_products_of_a_parallel_function_give_back_what_they_allocate(func) -> None:
    # Enzyme taped the gufunc's dims and steps slots (their addresses in the OpenMP argument pack) and never freed
    # them: 353 and 131 bytes lost per call until 2026-12-07 (pyjlad.taped_slot_frees).
    x = np.linspace(0.1, 1.0, 64)
    v = np.cos(x)
    expected = np.asarray(_jax().jvp(_jax().grad(_allocating_per_iteration_jax), (x.copy(),), (v.copy(),))[1])
    _right_then_steady(lambda: pyjlad.hvp(func, (x,), v), expected, x, v)
