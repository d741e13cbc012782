"""Temporaries updated in place from an element a later step overwrites (``V[i] = p * V[i] + q * V[i + 1]``).

Backward induction in a binomial or trinomial option tree, value iteration, Jacobi-like sweeps: the loop reads
``V[i + 1]``, which its next iteration overwrites. Enzyme v0.0.289 asks LLVM's alias analysis, one iteration at a
time, whether a later write overwrites what a load read; for ``V[i]`` against ``V[i + 1]`` it answered "no", and
the reverse sweep read ``V[i + 1]`` again after the loop had overwritten it. Until 2026-12-06 pyjlad's scoped alias
metadata (:mod:`pyjlad.memory_scopes`) had removed the write that made Enzyme keep the value anyway (the
temporary's decrement), and these gradients were **silently wrong** (an American put's d/dr: -349.4 against
-42.66) while ``jvp`` was right. Found by a user-style probe. Each derivative here is compared with JAX's (float64,
from copies taken before the call), in every loop shape of the class: forward and backward sweeps, rows read
ahead in an outer loop, several sweeps, the temporary made by ``np.empty``, ``np.zeros``, ``x * 2.0`` or a helper.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from corpus.family_numerics import american_put, american_put_jax, value_iteration, value_iteration_jax
from numba import njit

import pyjlad

jax.config.update("jax_enable_x64", True)


@njit
def filled_then_read_ahead(p, n):
    V = np.empty(n + 1)
    for i in range(n + 1):
        V[i] = float(i)
    for i in range(n):
        V[i] = p * V[i + 1]
    return V[0] ** 2 + V[1] ** 2


def filled_then_read_ahead_jax(p, n):
    V = jnp.arange(n + 1.0)
    V = V.at[:n].set(p * V[1:])
    return V[0] ** 2 + V[1] ** 2


@njit
def sweeps_of_a_temporary(x, w):
    """Several forward sweeps of ``v[i] = w v[i] + (1 - w) tanh(v[i + 1])`` over ``x * 2.0``."""
    v = x * 2.0
    for _ in range(3):
        for i in range(v.size - 1):
            v[i] = w * v[i] + (1.0 - w) * np.tanh(v[i + 1])
    return np.sum(v ** 2)


def sweeps_of_a_temporary_jax(x, w):
    v = x * 2.0
    for _ in range(3):
        v = v.at[:-1].set(w * v[:-1] + (1.0 - w) * jnp.tanh(v[1:]))
    return jnp.sum(v ** 2)


@njit
def backward_sweep(x, w):
    """Read ahead in a descending loop: ``v[i]`` from ``v[i - 1]``, which the next iteration overwrites."""
    v = np.zeros(x.size)
    for i in range(x.size):
        v[i] = x[i] ** 2
    for i in range(x.size - 1, 0, -1):
        v[i] = w * v[i - 1] + np.sin(v[i])
    return np.sum(v * x)


def backward_sweep_jax(x, w):
    v = x ** 2
    v = v.at[1:].set(w * v[:-1] + jnp.sin(v[1:]))
    return jnp.sum(v * x)


@njit
def rows_read_ahead(x, w):
    """The next row read inside a row's inner loop: overwritten by the outer loop's next iteration."""
    m = np.empty((x.size, 3))
    for i in range(x.size):
        for c in range(3):
            m[i, c] = x[i] * (c + 1.0)
    for i in range(x.size - 1):
        for c in range(3):
            m[i, c] = w * m[i + 1, c] * m[i, c] + 0.1 * c
    return np.sum(np.cos(m))


def rows_read_ahead_jax(x, w):
    m = x[:, None] * jnp.arange(1.0, 4.0)[None, :]
    m = m.at[:-1].set(w * m[1:] * m[:-1] + 0.1 * jnp.arange(3.0)[None, :])
    return jnp.sum(jnp.cos(m))


X = np.array([0.4, -0.7, 1.1, 0.25, -0.3, 0.9])
REWARDS = np.array([0.3, -0.2, 0.5, 0.1, 0.8, -0.4, 0.6])

#: (function, JAX function, arguments, wrt)
CASES = {
    "filled_then_read_ahead": (filled_then_read_ahead, filled_then_read_ahead_jax, (0.4, 6), (0,)),
    "american_put": (american_put, american_put_jax, (100.0, 0.03, 0.25), (0, 1, 2)),
    "sweeps_of_a_temporary": (sweeps_of_a_temporary, sweeps_of_a_temporary_jax, (X, 0.35), (0, 1)),
    "backward_sweep": (backward_sweep, backward_sweep_jax, (X, 0.6), (0, 1)),
    "rows_read_ahead": (rows_read_ahead, rows_read_ahead_jax, (X, 0.45), (0, 1)),
    "value_iteration": (value_iteration, value_iteration_jax, (0.9, REWARDS), (0, 1)),
}


def _copies(args):
    return tuple(np.copy(a) if isinstance(a, np.ndarray) else a for a in args)


def _jax_args(args):
    return tuple(jnp.asarray(a) if isinstance(a, np.ndarray) else a for a in args)


@pytest.mark.parametrize("name", CASES)
def test_gradient_of_a_temporary_read_ahead(name):
    f, f_jax, args, wrt = CASES[name]
    before = _copies(args)
    expected = jax.grad(f_jax, argnums=wrt)(*_jax_args(before))
    value, got = pyjlad.value_and_grad(f, wrt=wrt)(*_copies(args))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(value, float(f_jax(*_jax_args(before))), rtol=1e-12)
    for a, b in zip(args, before):
        assert not isinstance(a, np.ndarray) or a.tobytes() == b.tobytes()


@pytest.mark.parametrize("name", ["american_put", "sweeps_of_a_temporary", "rows_read_ahead"])
def test_hessian_of_a_temporary_read_ahead(name):
    f, f_jax, args, _ = CASES[name]
    first = args[0]
    rest = args[1:]
    expected = jax.hessian(lambda x: f_jax(x, *_jax_args(rest)))(jnp.asarray(first) if isinstance(first, np.ndarray)
                                                                   else first)
    got = pyjlad.hessian(f, *_copies(args))
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-10)


DF_PUT = pyjlad.grad(american_put, wrt=(1, 2))


@njit
def put_greeks_inside_numba(S0, r, sig):
    return DF_PUT(S0, r, sig)


def test_gradient_called_inside_numba():
    expected = jax.grad(american_put_jax, argnums=(1, 2))(100.0, 0.03, 0.25)
    got = put_greeks_inside_numba(100.0, 0.03, 0.25)
    np.testing.assert_allclose(got, expected, rtol=1e-10)
