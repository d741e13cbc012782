"""Physics kernels: explicit PDE steps on swapped buffers, N-body leapfrog, pair potentials,
spring networks, ODE integrators (Euler, Verlet, RK4), upwind schemes.

Each program is a Numba function and a ``jax.numpy`` twin computing the same value.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.margins import away
from corpus.program import program

FAMILY = "physics"
SMOOTH = ("gradient", "hvp")
ARRAY = ("jacobian", "jvp", "vjp")


# ------------------------------------------------------------------ heat equation, swapped buffers
@njit
def heat_explicit(u0, alpha):
    u = u0.copy()
    v = np.empty_like(u0)
    n = u0.shape[0]
    for _ in range(20):
        v[0] = 0.0
        v[n - 1] = 0.0
        for i in range(1, n - 1):
            v[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    return u


def heat_explicit_jax(u0, alpha):
    u = jnp.asarray(u0)
    for _ in range(20):
        inner = u[1:-1] + alpha * (u[:-2] - 2.0 * u[1:-1] + u[2:])
        u = jnp.concatenate([jnp.zeros(1), inner, jnp.zeros(1)])
    return u


def _heat_args(rng, n=9):
    return np.sin(np.linspace(0.0, np.pi, n)) + 0.1 * rng.standard_normal(n), float(rng.uniform(0.1, 0.4))


program(FAMILY, "heat-explicit", heat_explicit, heat_explicit_jax, _heat_args, wrt=(0, 1),
        transforms=ARRAY)


@njit
def heat_energy(u0, alpha, steps):
    u = u0.copy()
    v = u0.copy()
    n = u0.shape[0]
    for _ in range(steps):
        for i in range(1, n - 1):
            v[i] = u[i] + alpha * (u[i - 1] - 2.0 * u[i] + u[i + 1])
        u, v = v, u
    e = 0.0
    for i in range(n):
        e += u[i] * u[i]
    return e / n


def heat_energy_jax(u0, alpha, steps):
    u = jnp.asarray(u0)
    for _ in range(steps):
        u = u.at[1:-1].set(u[1:-1] + alpha * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
    return jnp.mean(u * u)


program(FAMILY, "heat-energy", heat_energy, heat_energy_jax,
        lambda rng: (*_heat_args(rng, 12), 15), wrt=(0, 1))
program(FAMILY, "heat-energy-hvp", heat_energy, heat_energy_jax,
        lambda rng: (*_heat_args(rng, 8), 6), transforms=SMOOTH)


@njit
def heat_2d(u0, kappa):
    u = u0.copy()
    v = u0.copy()
    ny, nx = u0.shape
    for _ in range(5):
        for i in range(1, ny - 1):
            for j in range(1, nx - 1):
                lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
                v[i, j] = u[i, j] + kappa * lap
        u, v = v, u
    s = 0.0
    for i in range(ny):
        for j in range(nx):
            s += u[i, j] * u[i, j] * (1.0 + 0.1 * i)
    return s


def heat_2d_jax(u0, kappa):
    u = jnp.asarray(u0)
    for _ in range(5):
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]
        u = u.at[1:-1, 1:-1].set(u[1:-1, 1:-1] + kappa * lap)
    weights = 1.0 + 0.1 * jnp.arange(u.shape[0])[:, None]
    return jnp.sum(u * u * weights)


program(FAMILY, "heat-2d", heat_2d, heat_2d_jax,
        lambda rng: (rng.standard_normal((6, 7)), float(rng.uniform(0.05, 0.2))), wrt=(0, 1),
        transforms=("gradient",))
program(FAMILY, "heat-2d-hvp", heat_2d, heat_2d_jax,
        lambda rng: (rng.standard_normal((5, 5)), 0.15), transforms=SMOOTH)


@njit
def heat_explicit_f32(u0, alpha):
    u = u0.copy()
    v = u0.copy()
    n = u0.shape[0]
    for _ in range(10):
        for i in range(1, n - 1):
            v[i] = u[i] + alpha * (u[i - 1] - np.float32(2.0) * u[i] + u[i + 1])
        u, v = v, u
    return np.sum(u * u)


def heat_explicit_f32_jax(u0, alpha):
    u = jnp.asarray(u0)
    for _ in range(10):
        u = u.at[1:-1].set(u[1:-1] + alpha * (u[:-2] - 2.0 * u[1:-1] + u[2:]))
    return jnp.sum(u * u)


program(FAMILY, "heat-explicit-f32", heat_explicit_f32, heat_explicit_f32_jax,
        lambda rng: (rng.standard_normal(10).astype(np.float32), np.float32(0.2)),
        rtol=1e-4, atol=1e-5)


# ------------------------------------------------------------------ wave equation, three buffers
@njit
def wave_leapfrog(u0, c2):
    prev = u0.copy()
    cur = u0.copy()
    nxt = np.zeros_like(u0)
    n = u0.shape[0]
    for _ in range(12):
        for i in range(1, n - 1):
            nxt[i] = 2.0 * cur[i] - prev[i] + c2 * (cur[i - 1] - 2.0 * cur[i] + cur[i + 1])
        prev, cur, nxt = cur, nxt, prev
    return cur


def wave_leapfrog_jax(u0, c2):
    prev = jnp.asarray(u0)
    cur = jnp.asarray(u0)
    nxt = jnp.zeros_like(prev)
    for _ in range(12):
        inner = 2.0 * cur[1:-1] - prev[1:-1] + c2 * (cur[:-2] - 2.0 * cur[1:-1] + cur[2:])
        nxt = nxt.at[1:-1].set(inner)
        prev, cur, nxt = cur, nxt, prev
    return cur


program(FAMILY, "wave-leapfrog", wave_leapfrog, wave_leapfrog_jax,
        lambda rng: (rng.standard_normal(8), float(rng.uniform(0.2, 0.5))), wrt=(0, 1),
        transforms=ARRAY)


# ------------------------------------------------------------------ N-body
@njit
def nbody_accelerations(pos, mass, acc):
    n = pos.shape[0]
    for i in range(n):
        for k in range(3):
            acc[i, k] = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                dx = pos[j, 0] - pos[i, 0]
                dy = pos[j, 1] - pos[i, 1]
                dz = pos[j, 2] - pos[i, 2]
                r2 = dx * dx + dy * dy + dz * dz + 0.01
                d = mass[j] / (r2 * math.sqrt(r2))
                acc[i, 0] += d * dx
                acc[i, 1] += d * dy
                acc[i, 2] += d * dz


@njit
def nbody_energy(pos, vel, mass):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        e += 0.5 * mass[i] * (vel[i, 0] ** 2 + vel[i, 1] ** 2 + vel[i, 2] ** 2)
        for j in range(i + 1, n):
            dx = pos[j, 0] - pos[i, 0]
            dy = pos[j, 1] - pos[i, 1]
            dz = pos[j, 2] - pos[i, 2]
            e -= mass[i] * mass[j] / math.sqrt(dx * dx + dy * dy + dz * dz + 0.01)
    return e


@njit
def nbody_leapfrog(pos0, vel0, mass, dt, steps):
    pos = pos0.copy()
    vel = vel0.copy()
    acc = np.zeros_like(pos0)
    nbody_accelerations(pos, mass, acc)
    for _ in range(steps):
        vel += 0.5 * dt * acc
        pos += dt * vel
        nbody_accelerations(pos, mass, acc)
        vel += 0.5 * dt * acc
    return nbody_energy(pos, vel, mass) + np.sum(pos[:, 0] * pos[:, 0])


# The same kernels compiled with NumPy's error model (no zero-division checks).
nbody_accelerations_numpy_errors = njit(error_model="numpy")(nbody_accelerations.py_func)
nbody_energy_numpy_errors = njit(error_model="numpy")(nbody_energy.py_func)


@njit(error_model="numpy")
def nbody_leapfrog_numpy_errors(pos0, vel0, mass, dt, steps):
    pos = pos0.copy()
    vel = vel0.copy()
    acc = np.zeros_like(pos0)
    nbody_accelerations_numpy_errors(pos, mass, acc)
    for _ in range(steps):
        vel += 0.5 * dt * acc
        pos += dt * vel
        nbody_accelerations_numpy_errors(pos, mass, acc)
        vel += 0.5 * dt * acc
    return nbody_energy_numpy_errors(pos, vel, mass) + np.sum(pos[:, 0] * pos[:, 0])


def _accelerations_jax(pos, mass):
    diff = pos[None, :, :] - pos[:, None, :]
    r2 = jnp.sum(diff * diff, axis=-1) + 0.01
    d = jnp.where(jnp.eye(pos.shape[0], dtype=bool), 0.0, mass[None, :] / (r2 * jnp.sqrt(r2)))
    return jnp.sum(d[:, :, None] * diff, axis=1)


def _energy_jax(pos, vel, mass):
    kinetic = 0.5 * jnp.sum(mass * jnp.sum(vel * vel, axis=1))
    diff = pos[None, :, :] - pos[:, None, :]
    inv = 1.0 / jnp.sqrt(jnp.sum(diff * diff, axis=-1) + 0.01)
    upper = jnp.triu(jnp.ones_like(inv), 1)
    return kinetic - jnp.sum(upper * mass[:, None] * mass[None, :] * inv)


def nbody_leapfrog_jax(pos0, vel0, mass, dt, steps):
    pos, vel = jnp.asarray(pos0), jnp.asarray(vel0)
    acc = _accelerations_jax(pos, mass)
    for _ in range(steps):
        vel = vel + 0.5 * dt * acc
        pos = pos + dt * vel
        acc = _accelerations_jax(pos, mass)
        vel = vel + 0.5 * dt * acc
    return _energy_jax(pos, vel, mass) + jnp.sum(pos[:, 0] ** 2)


def _nbody_args(rng):
    pos = rng.standard_normal((4, 3))
    vel = 0.3 * rng.standard_normal((4, 3))
    return pos, vel, rng.uniform(0.5, 1.5, 4), 0.01, 8


program(FAMILY, "nbody-leapfrog", nbody_leapfrog, nbody_leapfrog_jax, _nbody_args,
        wrt=(0, 1), transforms=("gradient",))
program(FAMILY, "nbody-leapfrog-hvp", nbody_leapfrog, nbody_leapfrog_jax, _nbody_args,
        transforms=("hvp",))
program(FAMILY, "nbody-leapfrog-numpy-errors", nbody_leapfrog_numpy_errors, nbody_leapfrog_jax,
        _nbody_args, wrt=(0, 1), transforms=("gradient",))
program(FAMILY, "nbody-leapfrog-numpy-errors-hvp", nbody_leapfrog_numpy_errors, nbody_leapfrog_jax,
        _nbody_args, transforms=("hvp",))
program(FAMILY, "nbody-energy", nbody_energy, _energy_jax,
        lambda rng: _nbody_args(rng)[:3], wrt=(0, 1, 2), transforms=SMOOTH)
program(FAMILY, "nbody-energy-numpy-errors", nbody_energy_numpy_errors, _energy_jax,
        lambda rng: _nbody_args(rng)[:3], wrt=(0, 1, 2), transforms=SMOOTH)


# ------------------------------------------------------------------ pair potentials
def _lattice(rng, shape=(3, 3), spacing=1.12, jitter=0.04):
    """Points of a 2-D lattice, jittered: pair distances stay near the lattice's."""
    grid = np.array([(i, j) for i in range(shape[0]) for j in range(shape[1])], dtype=np.float64)
    return spacing * grid + rng.uniform(-jitter, jitter, grid.shape)


@njit
def lennard_jones(pos, eps, sigma):
    n = pos.shape[0]
    e = 0.0
    for i in range(n):
        for j in range(i + 1, n):
            r2 = 0.0
            for k in range(pos.shape[1]):
                d = pos[i, k] - pos[j, k]
                r2 += d * d
            s6 = (sigma * sigma / r2) ** 3
            e += 4.0 * eps * (s6 * s6 - s6)
    return e


def lennard_jones_jax(pos, eps, sigma):
    diff = pos[:, None, :] - pos[None, :, :]
    n = pos.shape[0]
    iu = jnp.triu_indices(n, 1)
    r2 = jnp.sum(diff * diff, axis=-1)[iu]
    s6 = (sigma * sigma / r2) ** 3
    return jnp.sum(4.0 * eps * (s6 * s6 - s6))


program(FAMILY, "lennard-jones", lennard_jones, lennard_jones_jax,
        lambda rng: (_lattice(rng), float(rng.uniform(0.5, 1.5)), 1.0), wrt=(0, 1, 2))
program(FAMILY, "lennard-jones-hvp", lennard_jones, lennard_jones_jax,
        lambda rng: (_lattice(rng), 1.0, 1.0), transforms=SMOOTH)


@njit
def lennard_jones_cutoff(pos, rc):
    n = pos.shape[0]
    e = 0.0
    rc2 = rc * rc
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            if r2 < rc2:
                inv6 = 1.0 / (r2 * r2 * r2)
                e += 4.0 * (inv6 * inv6 - inv6)
    return e


def lennard_jones_cutoff_jax(pos, rc):
    diff = pos[:, None, :] - pos[None, :, :]
    iu = jnp.triu_indices(pos.shape[0], 1)
    r2 = jnp.sum(diff * diff, axis=-1)[iu]
    inv6 = 1.0 / r2 ** 3
    return jnp.sum(jnp.where(r2 < rc * rc, 4.0 * (inv6 * inv6 - inv6), 0.0))


# Lattice spacing 1.0: pair distances 1, 1.41, 2, 2.24, 2.83 (+-0.1): a cutoff of 2.5 has margin.
program(FAMILY, "lennard-jones-cutoff", lennard_jones_cutoff, lennard_jones_cutoff_jax,
        lambda rng: (_lattice(rng, (4, 3), 1.0, 0.03), 2.5), transforms=SMOOTH)


@njit
def lj_forces(pos):
    n = pos.shape[0]
    f = np.zeros_like(pos)
    for i in range(n):
        for j in range(n):
            if j == i:
                continue
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            inv6 = 1.0 / (r2 * r2 * r2)
            coef = 24.0 * (2.0 * inv6 * inv6 - inv6) / r2
            f[i, 0] += coef * dx
            f[i, 1] += coef * dy
    return f


def lj_forces_jax(pos):
    return -jax.grad(lambda p: lennard_jones_jax(p, 1.0, 1.0))(pos)


program(FAMILY, "lj-forces", lj_forces, lj_forces_jax,
        lambda rng: (_lattice(rng, (2, 3)),), transforms=ARRAY, rtol=1e-8)


@njit
def coulomb_softened(pos, q):
    e = 0.0
    for i in range(pos.shape[0]):
        for j in range(i + 1, pos.shape[0]):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            e += q[i] * q[j] / math.sqrt(dx * dx + dy * dy + 0.05)
    return e


def coulomb_softened_jax(pos, q):
    diff = pos[:, None, :] - pos[None, :, :]
    iu = jnp.triu_indices(pos.shape[0], 1)
    inv = 1.0 / jnp.sqrt(jnp.sum(diff * diff, axis=-1) + 0.05)
    return jnp.sum((q[:, None] * q[None, :] * inv)[iu])


program(FAMILY, "coulomb-softened", coulomb_softened, coulomb_softened_jax,
        lambda rng: (rng.standard_normal((6, 2)), rng.choice([-1.0, 1.0], 6) * rng.uniform(0.5, 1.0, 6)),
        wrt=(0, 1))


@njit
def gravity_probes(probes, sources, mass):
    out = np.empty(probes.shape[0])
    for p in range(probes.shape[0]):
        phi = 0.0
        for s in range(sources.shape[0]):
            dx = probes[p, 0] - sources[s, 0]
            dy = probes[p, 1] - sources[s, 1]
            phi -= mass[s] / math.sqrt(dx * dx + dy * dy + 0.1)
        out[p] = phi
    return out


def gravity_probes_jax(probes, sources, mass):
    diff = probes[:, None, :] - sources[None, :, :]
    return -jnp.sum(mass[None, :] / jnp.sqrt(jnp.sum(diff * diff, axis=-1) + 0.1), axis=1)


program(FAMILY, "gravity-probes", gravity_probes, gravity_probes_jax,
        lambda rng: (rng.standard_normal((4, 2)), rng.standard_normal((5, 2)), rng.uniform(0.5, 2.0, 5)),
        wrt=(0, 2), transforms=ARRAY)


# ------------------------------------------------------------------ springs and chains
@njit
def spring_chain(p, k, rest):
    e = 0.0
    for i in range(p.shape[0] - 1):
        dx = p[i + 1, 0] - p[i, 0]
        dy = p[i + 1, 1] - p[i, 1]
        stretch = math.sqrt(dx * dx + dy * dy) - rest
        e += 0.5 * k * stretch * stretch
    for i in range(p.shape[0]):
        e += 0.1 * p[i, 1]
    return e


def spring_chain_jax(p, k, rest):
    d = p[1:] - p[:-1]
    stretch = jnp.sqrt(jnp.sum(d * d, axis=1)) - rest
    return jnp.sum(0.5 * k * stretch ** 2) + 0.1 * jnp.sum(p[:, 1])


def _chain_args(rng, n=8):
    p = np.stack([np.arange(n, dtype=np.float64), np.zeros(n)], axis=1) + 0.2 * rng.standard_normal((n, 2))
    return p, float(rng.uniform(1.0, 3.0)), 0.9


program(FAMILY, "spring-chain", spring_chain, spring_chain_jax, _chain_args, wrt=(0, 1, 2))
program(FAMILY, "spring-chain-hvp", spring_chain, spring_chain_jax, _chain_args, transforms=SMOOTH)


@njit
def spring_network(p, bond_i, bond_j, rest):
    # A spring network given by integer bond lists.
    e = 0.0
    for b in range(bond_i.shape[0]):
        i = bond_i[b]
        j = bond_j[b]
        dx = p[i, 0] - p[j, 0]
        dy = p[i, 1] - p[j, 1]
        r = math.sqrt(dx * dx + dy * dy)
        e += (r - rest[b]) ** 2
    return e


def spring_network_jax(p, bond_i, bond_j, rest):
    d = p[bond_i] - p[bond_j]
    return jnp.sum((jnp.sqrt(jnp.sum(d * d, axis=1)) - rest) ** 2)


def _network_args(rng):
    p = _lattice(rng, (3, 3), 1.0, 0.1)
    bonds = [(a, b) for a in range(9) for b in range(a + 1, 9) if np.linalg.norm(p[a] - p[b]) < 1.6]
    bi = np.array([b[0] for b in bonds], dtype=np.int64)
    bj = np.array([b[1] for b in bonds], dtype=np.int64)
    return p, bi, bj, rng.uniform(0.9, 1.3, len(bonds))


program(FAMILY, "spring-network", spring_network, spring_network_jax, _network_args, wrt=(0, 3))
program(FAMILY, "spring-network-hvp", spring_network, spring_network_jax, _network_args,
        transforms=SMOOTH)


@njit
def morse_chain(x, depth, a):
    e = 0.0
    for i in range(x.shape[0] - 1):
        t = 1.0 - math.exp(-a * (x[i + 1] - x[i] - 1.0))
        e += depth * t * t
    return e


def morse_chain_jax(x, depth, a):
    t = 1.0 - jnp.exp(-a * (jnp.diff(x) - 1.0))
    return jnp.sum(depth * t * t)


program(FAMILY, "morse-chain", morse_chain, morse_chain_jax,
        lambda rng: (np.arange(7.0) * 1.05 + 0.1 * rng.standard_normal(7), 2.0, float(rng.uniform(0.8, 1.5))),
        wrt=(0, 1, 2))
program(FAMILY, "morse-chain-hvp", morse_chain, morse_chain_jax,
        lambda rng: (np.arange(7.0) * 1.05 + 0.1 * rng.standard_normal(7), 2.0, 1.2), transforms=SMOOTH)


@njit
def xy_model(theta, coupling):
    ny, nx = theta.shape
    e = 0.0
    for i in range(ny):
        for j in range(nx):
            e -= coupling * math.cos(theta[i, j] - theta[(i + 1) % ny, j])
            e -= coupling * math.cos(theta[i, j] - theta[i, (j + 1) % nx])
    return e


def xy_model_jax(theta, coupling):
    return -coupling * (jnp.sum(jnp.cos(theta - jnp.roll(theta, -1, axis=0)))
                        + jnp.sum(jnp.cos(theta - jnp.roll(theta, -1, axis=1))))


program(FAMILY, "xy-model", xy_model, xy_model_jax,
        lambda rng: (rng.uniform(-np.pi, np.pi, (4, 5)), 1.3), wrt=(0, 1))
program(FAMILY, "xy-model-hvp", xy_model, xy_model_jax,
        lambda rng: (rng.uniform(-np.pi, np.pi, (4, 4)), 1.0), transforms=SMOOTH)


@njit
def ginzburg_landau(u, kappa):
    ny, nx = u.shape
    e = 0.0
    for i in range(ny):
        for j in range(nx):
            gx = u[i, (j + 1) % nx] - u[i, j]
            gy = u[(i + 1) % ny, j] - u[i, j]
            e += 0.5 * kappa * (gx * gx + gy * gy) + 0.25 * (u[i, j] ** 2 - 1.0) ** 2
    return e


def ginzburg_landau_jax(u, kappa):
    gx = jnp.roll(u, -1, axis=1) - u
    gy = jnp.roll(u, -1, axis=0) - u
    return jnp.sum(0.5 * kappa * (gx * gx + gy * gy) + 0.25 * (u * u - 1.0) ** 2)


program(FAMILY, "ginzburg-landau", ginzburg_landau, ginzburg_landau_jax,
        lambda rng: (rng.standard_normal((5, 4)), 0.7), transforms=SMOOTH)


# ------------------------------------------------------------------ ODE integrators
@njit
def _pendulum_rhs(theta, omega, g):
    return omega, -g * math.sin(theta) - 0.1 * omega


@njit
def pendulum_rk4(theta0, omega0, g):
    th = theta0
    om = omega0
    h = 0.05
    for _ in range(40):
        k1t, k1o = _pendulum_rhs(th, om, g)
        k2t, k2o = _pendulum_rhs(th + 0.5 * h * k1t, om + 0.5 * h * k1o, g)
        k3t, k3o = _pendulum_rhs(th + 0.5 * h * k2t, om + 0.5 * h * k2o, g)
        k4t, k4o = _pendulum_rhs(th + h * k3t, om + h * k3o, g)
        th += h / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t)
        om += h / 6.0 * (k1o + 2.0 * k2o + 2.0 * k3o + k4o)
    return th * th + 0.5 * om


def pendulum_rk4_jax(theta0, omega0, g):
    def rhs(th, om):
        return om, -g * jnp.sin(th) - 0.1 * om

    def step(_, state):
        th, om = state
        h = 0.05
        k1t, k1o = rhs(th, om)
        k2t, k2o = rhs(th + 0.5 * h * k1t, om + 0.5 * h * k1o)
        k3t, k3o = rhs(th + 0.5 * h * k2t, om + 0.5 * h * k2o)
        k4t, k4o = rhs(th + h * k3t, om + h * k3o)
        return (th + h / 6.0 * (k1t + 2.0 * k2t + 2.0 * k3t + k4t),
                om + h / 6.0 * (k1o + 2.0 * k2o + 2.0 * k3o + k4o))

    th, om = jax.lax.fori_loop(0, 40, step, (theta0 + 0.0 * g, omega0 + 0.0 * g))
    return th * th + 0.5 * om


program(FAMILY, "pendulum-rk4", pendulum_rk4, pendulum_rk4_jax,
        lambda rng: (float(rng.uniform(0.3, 1.2)), float(rng.uniform(-0.5, 0.5)), 9.81),
        wrt=(0, 1, 2))
program(FAMILY, "pendulum-rk4-hvp", pendulum_rk4, pendulum_rk4_jax,
        lambda rng: (float(rng.uniform(0.3, 1.2)), 0.2, 9.81), transforms=("hvp",))


@njit
def _lorenz(s, sigma, out):
    out[0] = sigma * (s[1] - s[0])
    out[1] = s[0] * (28.0 - s[2]) - s[1]
    out[2] = s[0] * s[1] - 8.0 / 3.0 * s[2]


@njit
def lorenz_rk4(s0, sigma):
    s = s0.copy()
    k1 = np.empty(3)
    k2 = np.empty(3)
    k3 = np.empty(3)
    k4 = np.empty(3)
    h = 0.01
    for _ in range(30):
        _lorenz(s, sigma, k1)
        _lorenz(s + 0.5 * h * k1, sigma, k2)
        _lorenz(s + 0.5 * h * k2, sigma, k3)
        _lorenz(s + h * k3, sigma, k4)
        s = s + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return s


def lorenz_rk4_jax(s0, sigma):
    def f(s):
        return jnp.stack([sigma * (s[1] - s[0]), s[0] * (28.0 - s[2]) - s[1], s[0] * s[1] - 8.0 / 3.0 * s[2]])

    s = jnp.asarray(s0)
    h = 0.01
    for _ in range(30):
        k1 = f(s)
        k2 = f(s + 0.5 * h * k1)
        k3 = f(s + 0.5 * h * k2)
        k4 = f(s + h * k3)
        s = s + h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return s


program(FAMILY, "lorenz-rk4", lorenz_rk4, lorenz_rk4_jax,
        lambda rng: (np.array([1.0, 1.0, 20.0]) + rng.standard_normal(3), 10.0), wrt=(0, 1),
        transforms=ARRAY, rtol=1e-8)


@njit
def damped_oscillator_euler(x0, v0, k, c):
    x = x0
    v = v0
    dt = 0.01
    for _ in range(200):
        a = -k * x - c * v
        x += dt * v
        v += dt * a
    return x * x + v * v


def damped_oscillator_euler_jax(x0, v0, k, c):
    def step(_, state):
        x, v = state
        return x + 0.01 * v, v + 0.01 * (-k * x - c * v)

    x, v = jax.lax.fori_loop(0, 200, step, (x0 + 0.0 * k, v0 + 0.0 * k))
    return x * x + v * v


program(FAMILY, "damped-oscillator-euler", damped_oscillator_euler, damped_oscillator_euler_jax,
        lambda rng: (1.0, float(rng.uniform(-1.0, 1.0)), float(rng.uniform(1.0, 4.0)), 0.3),
        wrt=(0, 1, 2, 3))


@njit
def anharmonic_verlet(x0, v0, lam):
    x = x0.copy()
    v = v0.copy()
    dt = 0.02
    a = -x - lam * x ** 3
    for _ in range(50):
        v += 0.5 * dt * a
        x += dt * v
        a = -x - lam * x ** 3
        v += 0.5 * dt * a
    return np.sum(0.5 * v * v + 0.5 * x * x + 0.25 * lam * x ** 4)


def anharmonic_verlet_jax(x0, v0, lam):
    def step(_, state):
        x, v, a = state
        v = v + 0.01 * a
        x = x + 0.02 * v
        a = -x - lam * x ** 3
        return x, v + 0.01 * a, a

    x0 = jnp.asarray(x0)
    x, v, _ = jax.lax.fori_loop(0, 50, step, (x0, jnp.asarray(v0), -x0 - lam * x0 ** 3))
    return jnp.sum(0.5 * v * v + 0.5 * x * x + 0.25 * lam * x ** 4)


program(FAMILY, "anharmonic-verlet", anharmonic_verlet, anharmonic_verlet_jax,
        lambda rng: (rng.standard_normal(4), rng.standard_normal(4), 0.5), wrt=(0, 1, 2))
program(FAMILY, "anharmonic-verlet-hvp", anharmonic_verlet, anharmonic_verlet_jax,
        lambda rng: (rng.standard_normal(4), rng.standard_normal(4), 0.5), transforms=("hvp",))


@njit
def sir_euler_loss(beta, gamma, observed):
    s = 0.99
    i = 0.01
    dt = 0.5
    loss = 0.0
    for t in range(observed.shape[0]):
        for _ in range(4):
            new_inf = beta * s * i
            rec = gamma * i
            s -= dt * new_inf
            i += dt * (new_inf - rec)
        loss += (i - observed[t]) ** 2
    return loss


def sir_euler_loss_jax(beta, gamma, observed):
    s, i = 0.99, 0.01
    loss = 0.0
    for t in range(observed.shape[0]):
        for _ in range(4):
            new_inf = beta * s * i
            s, i = s - 0.5 * new_inf, i + 0.5 * (new_inf - gamma * i)
        loss = loss + (i - observed[t]) ** 2
    return loss


program(FAMILY, "sir-euler-loss", sir_euler_loss, sir_euler_loss_jax,
        lambda rng: (float(rng.uniform(0.3, 0.6)), float(rng.uniform(0.1, 0.2)), rng.uniform(0.0, 0.3, 10)),
        wrt=(0, 1))


# ------------------------------------------------------------------ projectile with early exit
@njit
def projectile_range(v0, angle, drag):
    x = 0.0
    y = 0.0
    vx = v0 * math.cos(angle)
    vy = v0 * math.sin(angle)
    dt = 0.01
    xp = 0.0
    yp = 0.0
    for _ in range(100000):
        xp = x
        yp = y
        speed = math.sqrt(vx * vx + vy * vy)
        vx -= dt * drag * speed * vx
        vy -= dt * (9.81 + drag * speed * vy)
        x += dt * vx
        y += dt * vy
        if y < 0.0:
            break
    # Interpolate to the ground between the last two steps.
    return xp + (x - xp) * yp / (yp - y)


def projectile_range_jax(v0, angle, drag, steps=400):
    def step(state, _):
        x, y, vx, vy = state
        speed = jnp.sqrt(vx * vx + vy * vy)
        vx = vx - 0.01 * drag * speed * vx
        vy = vy - 0.01 * (9.81 + drag * speed * vy)
        new = (x + 0.01 * vx, y + 0.01 * vy, vx, vy)
        return new, jnp.stack([new[0], new[1]])

    zero = 0.0 * v0
    start = (zero, zero, v0 * jnp.cos(angle), v0 * jnp.sin(angle))
    _, path = jax.lax.scan(step, start, None, length=steps)
    path = jnp.concatenate([jnp.zeros((1, 2)), path])
    k = jnp.argmax(path[1:, 1] < 0.0) + 1
    (xp, yp), (x, y) = path[k - 1], path[k]
    return xp + (x - xp) * yp / (yp - y)


@njit
def _ground_margin(v0, angle, drag):
    """The smallest |y| over the steps around the landing, in units of the last step's drop."""
    x = 0.0
    y = 0.0
    vx = v0 * math.cos(angle)
    vy = v0 * math.sin(angle)
    for _ in range(100000):
        speed = math.sqrt(vx * vx + vy * vy)
        vx -= 0.01 * drag * speed * vx
        vy -= 0.01 * (9.81 + drag * speed * vy)
        yn = y + 0.01 * vy
        x += 0.01 * vx
        if yn < 0.0:
            return min(y, -yn) / (y - yn)
        y = yn
    return 0.0


def _projectile_args(rng):
    while True:
        args = (float(rng.uniform(8.0, 12.0)), float(rng.uniform(0.5, 1.0)), float(rng.uniform(0.01, 0.05)))
        if _ground_margin(*args) > 0.2:
            return args


program(FAMILY, "projectile-range", projectile_range, projectile_range_jax, _projectile_args,
        wrt=(0, 1, 2))


# ------------------------------------------------------------------ upwind schemes
@njit
def burgers_upwind(u0):
    u = u0.copy()
    v = u0.copy()
    n = u0.shape[0]
    dt = 0.05
    for _ in range(6):
        for i in range(1, n - 1):
            if u[i] > 0.0:
                v[i] = u[i] - dt * u[i] * (u[i] - u[i - 1])
            else:
                v[i] = u[i] - dt * u[i] * (u[i + 1] - u[i])
        u, v = v, u
    return u


def burgers_upwind_jax(u0):
    u = jnp.asarray(u0)
    for _ in range(6):
        back = u[1:-1] - 0.05 * u[1:-1] * (u[1:-1] - u[:-2])
        fwd = u[1:-1] - 0.05 * u[1:-1] * (u[2:] - u[1:-1])
        u = u.at[1:-1].set(jnp.where(u[1:-1] > 0.0, back, fwd))
    return u


# Values in [0.5, 1.5]: the scheme keeps them positive, so the branch never switches.
program(FAMILY, "burgers-upwind", burgers_upwind, burgers_upwind_jax,
        lambda rng: (rng.uniform(0.5, 1.5, 8),), transforms=ARRAY)


@njit
def advection_upwind(u0, vel):
    u = u0.copy()
    v = u0.copy()
    n = u0.shape[0]
    for _ in range(5):
        for i in range(1, n - 1):
            if vel[i] > 0.0:
                v[i] = u[i] - 0.3 * vel[i] * (u[i] - u[i - 1])
            else:
                v[i] = u[i] - 0.3 * vel[i] * (u[i + 1] - u[i])
        u, v = v, u
    s = 0.0
    for i in range(n):
        s += u[i] * u[i]
    return s


def advection_upwind_jax(u0, vel):
    u = jnp.asarray(u0)
    c = vel[1:-1]
    for _ in range(5):
        back = u[1:-1] - 0.3 * c * (u[1:-1] - u[:-2])
        fwd = u[1:-1] - 0.3 * c * (u[2:] - u[1:-1])
        u = u.at[1:-1].set(jnp.where(c > 0.0, back, fwd))
    return jnp.sum(u * u)


program(FAMILY, "advection-upwind", advection_upwind, advection_upwind_jax,
        lambda rng: (rng.standard_normal(10), away(rng, 10, -1.0, 1.0, (0.0,), 0.1)), wrt=(0, 1))


@njit
def lennard_jones_f32(pos):
    n = pos.shape[0]
    e = np.float32(0.0)
    for i in range(n):
        for j in range(i + 1, n):
            dx = pos[i, 0] - pos[j, 0]
            dy = pos[i, 1] - pos[j, 1]
            r2 = dx * dx + dy * dy
            inv6 = np.float32(1.0) / (r2 * r2 * r2)
            e += np.float32(4.0) * (inv6 * inv6 - inv6)
    return e


program(FAMILY, "lennard-jones-f32", lennard_jones_f32, lambda p: lennard_jones_jax(p, 1.0, 1.0),
        lambda rng: (_lattice(rng).astype(np.float32),), rtol=1e-4, atol=1e-4)
