"""Repeated derivative calls give back the memory they take (glibc's in-use bytes, :mod:`heap_use`).

A derivative called many times (an optimizer's loop) must reach a steady state: whatever a call allocates,
the call itself or pyjlad's block pool gives back. Each program here allocates Numba arrays inside
the function (LAPACK's copies, pivots, temporaries); the growth over 200 more calls after a warm-up must stay
under 40 bytes per call (Python's own bookkeeping moves by less; a lost Numba array costs at least its
48-byte header).

``np.linalg.solve`` lost about 220 bytes per call, whatever the matrix's size: three stack slots of Numba's
``solve`` (the 72-byte result of ``numba_attempt_nocopy_reshape`` and two 8-byte ones) that Enzyme v0.0.289
moved to the heap for a tape no reverse function reads (:mod:`pyjlad.unread_tape_slots`).
"""

from __future__ import annotations

import numpy as np
import pytest
from heap_use import growth_over
from numba import njit

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
