"""The benchmark workloads, each written once in Numba and idiomatically for each peer.

Every workload provides ``numba_f`` (the function pyjlad differentiates), its
arguments, the argument positions to differentiate, and peer versions:
``jax_f`` (traced by ``jax.jit(jax.grad)``), ``torch_f`` (PyTorch autograd) and
``autograd_f`` (HIPS autograd), all computing the same value.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from numba import njit


@dataclass
class Workload:
    name: str
    numba_f: Callable[..., Any]
    args: tuple[Any, ...]
    wrt: tuple[int, ...]
    jax_f: Callable[..., Any] | None = None
    torch_f: Callable[..., Any] | None = None
    autograd_f: Callable[..., Any] | None = None
    fd_params: int = 0
    notes: dict[str, str] = field(default_factory=dict)


# 1. Rosenbrock as a loop --------------------------------------------------
@njit
def rosenbrock(x):
    s = 0.0
    for i in range(x.shape[0] - 1):
        s += 100.0 * (x[i + 1] - x[i] ** 2) ** 2 + (1.0 - x[i]) ** 2
    return s


def rosenbrock_vec(np_):
    def f(x):
        return np_.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)
    return f


# 2. RK4 integration of the Lorenz system ----------------------------------
STEPS = 10_000
DT = 1e-3


@njit
def _lorenz(x, y, z, s, r, b):
    return s * (y - x), x * (r - z) - y, x * y - b * z


@njit
def lorenz_loss(state, params):
    return lorenz_steps(state, params, STEPS)


@njit
def lorenz_steps(state, params, steps):
    x, y, z = state[0], state[1], state[2]
    s, r, b = params[0], params[1], params[2]
    h = DT
    for _ in range(steps):
        k1 = _lorenz(x, y, z, s, r, b)
        k2 = _lorenz(x + 0.5 * h * k1[0], y + 0.5 * h * k1[1], z + 0.5 * h * k1[2], s, r, b)
        k3 = _lorenz(x + 0.5 * h * k2[0], y + 0.5 * h * k2[1], z + 0.5 * h * k2[2], s, r, b)
        k4 = _lorenz(x + h * k3[0], y + h * k3[1], z + h * k3[2], s, r, b)
        x += h / 6.0 * (k1[0] + 2 * k2[0] + 2 * k3[0] + k4[0])
        y += h / 6.0 * (k1[1] + 2 * k2[1] + 2 * k3[1] + k4[1])
        z += h / 6.0 * (k1[2] + 2 * k2[2] + 2 * k3[2] + k4[2])
    return x * x + y * y + z * z


def lorenz_jax():
    import jax
    import jax.numpy as jnp

    def rhs(u, p):
        x, y, z = u
        s, r, b = p
        return jnp.stack([s * (y - x), x * (r - z) - y, x * y - b * z])

    def f(state, params):
        def step(u, _):
            k1 = rhs(u, params)
            k2 = rhs(u + 0.5 * DT * k1, params)
            k3 = rhs(u + 0.5 * DT * k2, params)
            k4 = rhs(u + DT * k3, params)
            return u + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4), None
        u, _ = jax.lax.scan(step, state, None, length=STEPS)
        return jnp.sum(u * u)
    return f


def lorenz_torch(state, params):
    import torch

    def rhs(u):
        x, y, z = u[0], u[1], u[2]
        return torch.stack([params[0] * (y - x), x * (params[1] - z) - y, x * y - params[2] * z])

    u = state
    for _ in range(STEPS):
        k1 = rhs(u)
        k2 = rhs(u + 0.5 * DT * k1)
        k3 = rhs(u + 0.5 * DT * k2)
        k4 = rhs(u + DT * k3)
        u = u + DT / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)
    return torch.sum(u * u)


# 3. 2-D heat equation stencil ----------------------------------------------
GRID, HEAT_STEPS, ALPHA = 256, 100, 0.2


@njit
def heat_energy(u0, kappa):
    n = u0.shape[0]
    u = u0.copy()
    v = np.empty_like(u)
    for _ in range(HEAT_STEPS):
        for i in range(n):
            for j in range(n):
                up = u[i - 1, j] if i > 0 else 0.0
                down = u[i + 1, j] if i < n - 1 else 0.0
                left = u[i, j - 1] if j > 0 else 0.0
                right = u[i, j + 1] if j < n - 1 else 0.0
                v[i, j] = u[i, j] + ALPHA * kappa * (up + down + left + right - 4.0 * u[i, j])
        u, v = v, u
    return np.sum(u * u)


def heat_jax():
    import jax
    import jax.numpy as jnp

    def f(u0, kappa):
        def step(u, _):
            p = jnp.pad(u, 1)
            lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
            return u + ALPHA * kappa * lap, None
        u, _ = jax.lax.scan(step, u0, None, length=HEAT_STEPS)
        return jnp.sum(u * u)
    return f


def heat_torch(u0, kappa):
    import torch.nn.functional as F

    u = u0
    for _ in range(HEAT_STEPS):
        p = F.pad(u, (1, 1, 1, 1))
        lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
        u = u + ALPHA * kappa * lap
    return (u * u).sum()


# 4. MLP loss -------------------------------------------------------------
@njit
def mlp_loss(x, w1, w2, w3, y):
    h1 = np.tanh(x @ w1)
    h2 = np.tanh(h1 @ w2)
    r = h2 @ w3 - y
    return np.sum(r * r) / x.shape[0]


def mlp_vec(np_):
    def f(x, w1, w2, w3, y):
        h1 = np_.tanh(x @ w1)
        h2 = np_.tanh(h1 @ w2)
        r = h2 @ w3 - y
        return np_.sum(r * r) / x.shape[0]
    return f


# 5. Pairwise n-body potential ----------------------------------------------
@njit
def nbody_energy(pos):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            dz = pos[i, 2] - pos[j, 2]
            e += 1.0 / math.sqrt(dx * dx + dy * dy + dz * dz + 0.01)
    return e


def nbody_vec(np_):
    def f(pos):
        d = pos[:, None, :] - pos[None, :, :]
        r = np_.sqrt(np_.sum(d * d, axis=-1) + 0.01)
        n = pos.shape[0]
        return 0.5 * (np_.sum(1.0 / r) - n / math.sqrt(0.01))
    return f


# 6. A scalar function of two floats ---------------------------------------
@njit
def two_floats(x, y):
    return math.sin(x) * y + x * x


def _two_floats_vec(np_):
    def f(x, y):
        return np_.sin(x) * y + x * x
    return f


class _NoPeer:
    """Stands in for a peer's module when only the Numba functions are wanted: every peer version is None."""

    def __getattr__(self, name: str) -> None:
        return None


def build(include_large: bool = True, peers: bool = True) -> list[Workload]:
    """The workloads with their data (deterministic); without the peers' versions if not ``peers``."""
    if peers:
        import autograd.numpy as anp
        import jax.numpy as jnp
        import torch
    else:
        anp = jnp = torch = _NoPeer()

    rng = np.random.default_rng(0)
    out = []
    sizes = (1_000, 1_000_000) if include_large else (1_000,)
    for n in sizes:
        out.append(Workload(f"Rosenbrock n={n:,}", rosenbrock, (rng.uniform(-1, 1, n),), (0,),
                            jax_f=rosenbrock_vec(jnp), torch_f=rosenbrock_vec(torch),
                            autograd_f=rosenbrock_vec(anp), fd_params=n))
    out.append(Workload("RK4 Lorenz, 10^4 steps", lorenz_loss,
                        (np.array([1.0, 1.0, 1.0]), np.array([10.0, 28.0, 8.0 / 3.0])), (0, 1),
                        jax_f=lorenz_jax(), torch_f=lorenz_torch, fd_params=6,
                        notes={"autograd": "not run: a 10^4-step Python loop of boxed scalars"}))
    out.append(Workload("heat 256x256, 100 steps", heat_energy,
                        (rng.uniform(0, 1, (GRID, GRID)), 1.0), (0, 1),
                        jax_f=heat_jax(), torch_f=heat_torch, fd_params=GRID * GRID + 1,
                        notes={"autograd": "not run: autograd has no in-place/scan form of the stencil"}))
    out.append(Workload("MLP 256x64-128-64", mlp_loss,
                        (rng.normal(size=(256, 64)), rng.normal(size=(64, 128)) / 8, rng.normal(size=(128, 64)) / 11,
                         rng.normal(size=(64, 1)) / 8, rng.normal(size=(256, 1))), (1, 2, 3),
                        jax_f=mlp_vec(jnp), torch_f=mlp_vec(torch), autograd_f=mlp_vec(anp),
                        fd_params=64 * 128 + 128 * 64 + 64))
    out.append(Workload("n-body n=1,000", nbody_energy, (rng.uniform(-1, 1, (1000, 3)),), (0,),
                        jax_f=nbody_vec(jnp), torch_f=nbody_vec(torch), autograd_f=nbody_vec(anp), fd_params=3000))
    out.append(Workload("two floats", two_floats, (0.3, 1.7), (0, 1),
                        jax_f=_two_floats_vec(jnp), torch_f=_two_floats_vec(torch),
                        autograd_f=_two_floats_vec(anp), fd_params=2))
    if not peers:
        out = [replace(w, jax_f=None, torch_f=None, autograd_f=None) for w in out]
    return out
