"""Transforms that run a function drawing unseeded random numbers more than once: every run draws what one plain
call would, and the random state is left as that call would leave it.

Until 2026-12-06 a forward ``jacobian``, a batched ``jvp`` and the ``jvp`` of an array result ran ``f`` once per
chunk (and once to learn the result's shape), each drawing new numbers: the columns came from different draws
(found by a user-style probe). The oracles are hand-derived from the numbers a plain Numba call draws after the
same seed: ``d/dx (x * x * z) = 2 x z``.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from numba import njit

import pyjlad

X = np.linspace(0.5, 1.5, 6)


@njit
def _seed(k):
    np.random.seed(k)
    random.seed(k)


@njit
def _normals(n):
    return np.random.normal(1.0, 0.5, n)


@njit
def _uniforms(n):
    out = np.empty(n)
    for i in range(n):
        out[i] = random.random()
    return out


@njit
def _noisy(x):
    return x * x * np.random.normal(1.0, 0.5, x.shape[0])


@njit
def _noisy_sum(x):
    return np.sum(x * x * np.random.normal(1.0, 0.5, x.shape[0]))


@njit
def _odd_normals(x):
    return x * x * np.sum(np.random.normal(1.0, 0.5, x.shape[0] - 1))  # an odd count: a spare deviate kept


@njit
def _python_random(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        out[i] = x[i] * x[i] * random.random()
    return out


def _draws(k: int, draw, *sizes: int) -> list[np.ndarray]:
    """What plain calls of ``draw`` give after seeding with ``k``, one per size."""
    _seed(k)
    return [draw(n) for n in sizes]


@pytest.mark.parametrize("chunk", [1, 2, 32])
def test_a_forward_jacobian_takes_one_draw_for_every_column(chunk: int) -> None:
    first, following = _draws(11, _normals, 6, 6)
    x = X.copy()
    _seed(11)
    jac = pyjlad.jacobian(_noisy, x, mode="forward", chunk=chunk)
    np.testing.assert_allclose(jac, np.diag(2.0 * X * first), rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(_normals(6), following, rtol=0)  # the state as after one plain call
    np.testing.assert_array_equal(x, X)


def test_a_spare_normal_deviate_is_replayed_too() -> None:
    first, following = _draws(3, _normals, 5, 6)
    _seed(3)
    jac = pyjlad.jacobian(_odd_normals, X.copy(), mode="forward", chunk=2)
    np.testing.assert_allclose(jac, np.diag(2.0 * X * first.sum()), rtol=1e-13)
    np.testing.assert_allclose(_normals(6), following, rtol=0)


def test_batched_jvp_and_the_jvp_of_an_array_result() -> None:
    first, following = _draws(5, _normals, 6, 6)
    _seed(5)
    value, tangents = pyjlad.jvp(_noisy_sum, (X.copy(),), (np.eye(6),), batched=True, chunk=2)
    assert value == pytest.approx(np.sum(X * X * first), rel=1e-14)
    np.testing.assert_allclose(tangents, 2.0 * X * first, rtol=1e-14)
    np.testing.assert_allclose(_normals(6), following, rtol=0)
    _seed(5)
    value, tangent = pyjlad.jvp(_noisy, (X.copy(),), (np.ones(6),))
    np.testing.assert_allclose(value, X * X * first, rtol=1e-15)
    np.testing.assert_allclose(tangent, 2.0 * X * first, rtol=1e-14)
    np.testing.assert_allclose(_normals(6), following, rtol=0)


def test_pythons_random_module_in_numba_code() -> None:
    first, following = _draws(7, _uniforms, 6, 6)
    _seed(7)
    jac = pyjlad.jacobian(_python_random, X.copy(), mode="forward", chunk=2)
    np.testing.assert_allclose(jac, np.diag(2.0 * X * first), rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(_uniforms(6), following, rtol=0)
