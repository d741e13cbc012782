"""scipy.optimize, JAX and PyTorch use pyjlad's gradients (each framework installed by the test command)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from numba import njit
from scipy import optimize

import pyjlad
from pyjlad.interop.jax import to_jax
from pyjlad.interop.torch import to_torch

jax.config.update("jax_enable_x64", True)


@njit
def energy(x, k):
    s = 0.0
    for i in range(x.shape[0] - 1):
        d = x[i + 1] - x[i]
        s += k * d * d + math.cos(x[i])
    return s


def energy_grad(x, k):
    d = np.diff(x)
    g = np.zeros_like(x)
    g[1:] += 2 * k * d
    g[:-1] -= 2 * k * d
    g[:-1] -= np.sin(x[:-1])
    return g, float(np.sum(d * d))


@njit
def squares(x):
    return x * x + np.sin(x)


def test_scipy_minimize_with_grad_and_value_and_grad() -> None:
    @njit
    def rosen(x):
        s = 0.0
        for i in range(x.shape[0] - 1):
            s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
        return s

    res = optimize.minimize(rosen, np.zeros(4), jac=pyjlad.grad(rosen), method="L-BFGS-B")
    np.testing.assert_allclose(res.x, np.ones(4), atol=1e-4)
    res = optimize.minimize(pyjlad.value_and_grad(rosen), np.zeros(4), jac=True, method="BFGS")
    np.testing.assert_allclose(res.x, np.ones(4), atol=1e-4)


def test_jax_grad_through_a_jax_program() -> None:
    f = to_jax(energy)
    x = jnp.array(np.random.default_rng(0).normal(size=6))
    k = 0.7

    def program(x, k):
        return jnp.exp(0.1 * f(jnp.tanh(x), k))

    gx, gk = jax.grad(program, argnums=(0, 1))(x, k)
    t = np.tanh(np.asarray(x))
    e = float(energy(t, k))
    dgt, dgk = energy_grad(t, k)
    outer = 0.1 * math.exp(0.1 * e)
    np.testing.assert_allclose(gx, outer * dgt * (1 - t ** 2), rtol=1e-12)
    assert float(gk) == pytest.approx(outer * dgk, rel=1e-12)
    jitted = jax.jit(jax.grad(program))(x, k)
    np.testing.assert_allclose(jitted, gx, rtol=1e-13)


def test_jax_vjp_of_an_array_valued_function() -> None:
    x = jnp.array([0.5, 1.0, 2.0])
    f = to_jax(squares, result_shape=jax.ShapeDtypeStruct((3,), jnp.float64))
    value, pullback = jax.vjp(f, x)
    np.testing.assert_allclose(value, np.asarray(x) ** 2 + np.sin(np.asarray(x)))
    (ct,) = pullback(jnp.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(ct, np.array([1.0, 2.0, 3.0]) * (2 * np.asarray(x) + np.cos(np.asarray(x))), rtol=1e-12)


def test_torch_autograd_through_a_torch_program() -> None:
    f = to_torch(energy)
    x = torch.tensor(np.random.default_rng(1).normal(size=5), dtype=torch.float64, requires_grad=True)
    k = torch.tensor(1.3, dtype=torch.float64, requires_grad=True)
    out = torch.log(1.0 + f(torch.sin(x), k) ** 2)
    out.backward()
    s = np.sin(x.detach().numpy())
    e = float(energy(s, 1.3))
    dgs, dgk = energy_grad(s, 1.3)
    outer = 2 * e / (1 + e * e)
    np.testing.assert_allclose(x.grad.numpy(), outer * dgs * np.cos(x.detach().numpy()), rtol=1e-12)
    assert float(k.grad) == pytest.approx(outer * dgk, rel=1e-12)


def test_torch_array_valued_function() -> None:
    f = to_torch(squares)
    x = torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64, requires_grad=True)
    (f(x) * torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)).sum().backward()
    xn = np.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(x.grad.numpy(), np.array([1.0, 2.0, 3.0]) * (2 * xn + np.cos(xn)), rtol=1e-12)


def test_bridges_batch_with_pyjlad_vmap_only_on_the_embedded_engine(monkeypatch) -> None:
    from pyjlad.interop import batches_with_pyjlad_vmap

    assert batches_with_pyjlad_vmap(None) and batches_with_pyjlad_vmap("embedded")
    assert not batches_with_pyjlad_vmap("julia")
    monkeypatch.setenv("PYJLAD_ENGINE", "julia")  # the default engine decides for engine=None
    assert not batches_with_pyjlad_vmap(None)
