"""Repeated Jacobians and Hessians replay their planned sweeps (pyjlad.vector_replay, issue 20).

A call whose arguments have the types and sizes of an earlier one skips planning (which the
tests check with a spy on the layout choice, the planning's last step); its results must be
those of the new values. Oracles: JAX in float64 on ``jax.numpy`` twins, from copies taken
before each call; the caller's arrays are checked unchanged.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from numba import njit

import pyjlad
import pyjlad.vector_products as vector_products

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(4242)


@njit
def affine_tanh(w, x, b, s):
    n, m = w.shape
    y = np.empty((n, 2))
    for i in range(n):
        acc = b[i]
        for j in range(m):
            acc += w[i, j] * x[j]
        y[i, 0] = s * np.tanh(acc)
        y[i, 1] = acc * x[i % m]
    return y


def affine_tanh_jax(w, x, b, s):
    acc = w @ x + b
    return jnp.stack([s * jnp.tanh(acc), acc * x[jnp.arange(w.shape[0]) % w.shape[1]]], axis=1)


@njit
def energy(x, c):
    acc = 0.0
    for i in range(x.size - 1):
        acc += c[0] * (x.flat[i + 1] - x.flat[i] ** 2) ** 2 + np.log1p(np.exp(x.flat[i]))
    return acc


def energy_jax(x, c):
    v = x.ravel()
    return jnp.sum(c[0] * (v[1:] - v[:-1] ** 2) ** 2 + jnp.log1p(jnp.exp(v[:-1])))


@pytest.fixture
def plannings(monkeypatch):
    """How many times a product planned its sweeps (chose their layout) since the fixture started."""
    count = [0]
    choose = vector_products._chosen_layout

    def counted(*args, **kwargs):
        count[0] += 1
        return choose(*args, **kwargs)

    monkeypatch.setattr(vector_products, "_chosen_layout", counted)
    return count


def _layer_args(n, m):
    return RNG.normal(size=(n, m)), RNG.normal(size=m), RNG.normal(size=n), float(RNG.uniform(0.5, 2.0))


@pytest.mark.parametrize("mode", ["forward", "reverse"])
@pytest.mark.parametrize("chunk", [3, 32])
def test_repeated_jacobians_take_the_new_values(mode, chunk, plannings):
    for call, (n, m) in enumerate([(6, 5), (6, 5), (6, 5), (4, 7), (6, 5)]):
        w0, x0, b0, s = _layer_args(n, m)
        w, x, b = w0.copy(), x0.copy(), b0.copy()
        got = pyjlad.jacobian(affine_tanh, w, x, b, s, wrt=(0, 1, 3), mode=mode, chunk=chunk)
        want = jax.jacrev(affine_tanh_jax, argnums=(0, 1, 3))(w0, x0, b0, s)
        for g, j in zip(got, want):
            assert g.shape == np.shape(j)
            np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-13)
        for a, a0 in zip((w, x, b), (w0, x0, b0)):
            np.testing.assert_array_equal(a, a0)
        if call == 2:  # the second and third calls of the first sizes were replayed
            assert plannings[0] == (1 if mode == "reverse" else 3)
    assert plannings[0] == (2 if mode == "reverse" else 6)  # planned once more: the new sizes


def test_repeated_hessians_take_the_new_values(plannings):
    # (A Hessian's replay is kept per argument types: sizes may change under it.)
    for shape in [(9,), (9,), (7,), (3, 3), (9,), (2, 5), (3, 3)]:
        x0, c0 = RNG.normal(size=shape), np.array([RNG.uniform(1.0, 5.0)])
        x, c = x0.copy(), c0.copy()
        got = pyjlad.hessian(energy, x, c, chunk=4)
        np.testing.assert_allclose(got, np.asarray(jax.hessian(energy_jax)(x0, c0)), rtol=1e-11, atol=1e-12)
        np.testing.assert_array_equal(x, x0)
        np.testing.assert_array_equal(c, c0)
    assert plannings[0] == 2  # once per number of dimensions


def test_another_chunk_or_argument_is_planned_anew(plannings):
    w0, x0, b0, s = _layer_args(5, 4)
    want = jax.jacrev(affine_tanh_jax, argnums=(1, 2))(w0, x0, b0, s)
    for chunk, wrt in [(2, 1), (3, 1), (2, 2), (2, 1)]:
        got = pyjlad.jacobian(affine_tanh, w0.copy(), x0.copy(), b0.copy(), s, wrt=wrt, mode="forward", chunk=chunk)
        np.testing.assert_allclose(got, np.asarray(want[wrt - 1]), rtol=1e-12, atol=1e-13)
    assert plannings[0] == 3


def test_concurrent_replays():
    pyjlad.jacobian(affine_tanh, *_layer_args(6, 5), wrt=1, mode="forward", chunk=4)  # planned here
    errors = []

    def work(seed):
        rng = np.random.default_rng(seed)
        for _ in range(20):
            w0, x0, b0, s = rng.normal(size=(6, 5)), rng.normal(size=5), rng.normal(size=6), 1.5
            got = pyjlad.jacobian(affine_tanh, w0.copy(), x0.copy(), b0.copy(), s, wrt=1, mode="forward", chunk=4)
            want = np.asarray(jax.jacfwd(affine_tanh_jax, argnums=1)(w0, x0, b0, s))
            if not np.allclose(got, want, rtol=1e-12, atol=1e-13):
                errors.append(np.abs(got - want).max())

    threads = [threading.Thread(target=work, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []


def test_repeated_batched_jvp_and_vjp_take_the_new_values(plannings):
    # Each call: new values, new directions; the value too must be the new one.
    for call in range(4):
        w0, x0, b0, s = _layer_args(6, 5)
        tx, ts = RNG.normal(size=(7, 5)), RNG.normal(size=7)
        cot = RNG.normal(size=(3, 6, 2))
        w, x, b = w0.copy(), x0.copy(), b0.copy()
        value, tangents = pyjlad.jvp(affine_tanh, (w, x, b, s), (None, tx.copy(), None, ts.copy()), batched=True,
                                     chunk=4)

        def one(t, u, w0=w0, x0=x0, b0=b0, s=s):
            return jax.jvp(lambda x_, s_: affine_tanh_jax(w0, x_, b0, s_), (x0, s), (t, u))[1]

        np.testing.assert_allclose(value, np.asarray(affine_tanh_jax(w0, x0, b0, s)), rtol=1e-13)
        np.testing.assert_allclose(tangents, np.asarray(jax.vmap(one)(tx, ts)), rtol=1e-12, atol=1e-13)
        value, cots = pyjlad.vjp(affine_tanh, (w, x, b, s), cot.copy(), batched=True, chunk=2)
        want = jax.vmap(jax.vjp(affine_tanh_jax, w0, x0, b0, s)[1])(cot)
        np.testing.assert_allclose(value, np.asarray(affine_tanh_jax(w0, x0, b0, s)), rtol=1e-13)
        for g, j in zip(cots, want):
            np.testing.assert_allclose(g, np.asarray(j), rtol=1e-12, atol=1e-13)
        for a, a0 in zip((w, x, b), (w0, x0, b0)):
            np.testing.assert_array_equal(a, a0)
        if call == 0:
            assert plannings[0] == 2
    assert plannings[0] == 2  # the later calls replayed
