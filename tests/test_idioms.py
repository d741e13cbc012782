"""Common numerical idioms that Enzyme used to abort on or get wrong (issue items 3 and 7).

Item 3, numerically stable log-sum-exp and softmax: a running maximum (or
minimum) followed by ``s += exp(x[i] - m)``. Enzyme's min-cut cache planner
aborted (``computeMinCache(): Assertion legalRecompute``) when the reduction
starts from a PHI, which LLVM's unrolled remainder loop and a previous loop that
may not run both give; pyjlad now runs Enzyme again without the planner.

Item 7, an N-body leapfrog integrator: with Numba's default error model the
gradient reported "an error while differentiated" (Enzyme moved the store of the
returned status into the reverse code of the division-by-zero path), and its
Hessian-vector product aborted (``forwardModeInvertedPointerFallback``: forward
mode over the reverse sweep could not type the integers reloaded from Enzyme's
tape). The entry now stores its status itself and ``hvp`` is reverse over
forward.

Oracles: JAX in float64 (``jax.grad``, ``jax.vjp``, ``jax.jacrev``, and
``jax.jvp`` of ``jax.grad`` for ``H @ v``) of twins written with ``jax.numpy``,
evaluated on copies of the inputs taken before pyjlad's calls; the inputs are
checked unchanged afterwards.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

RNG = np.random.default_rng(20240611)
X = RNG.normal(size=11) * 3.0  # 11: the unrolled loop (by 8) keeps a remainder loop
Y = RNG.normal(size=7) * 3.0
M = RNG.normal(size=(4, 9)) * 3.0
WEIGHTS = np.arange(1.0, 5.0)


# ------------------------------------------------------------------ item 3: log-sum-exp, softmax
@njit
def lse_if(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@njit
def lse_builtin_max(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        m = max(m, x[i])
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


@njit
def softmin(x):
    """-logsumexp(-x), stabilized with a running minimum."""
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] < m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(m - x[i])
    return m - math.log(s)


@njit
def lse_of_two(x, y):
    """logsumexp of the concatenation: the second running max starts where the first stopped."""
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    for i in range(y.shape[0]):
        if y[i] > m:
            m = y[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    for i in range(y.shape[0]):
        s += math.exp(y[i] - m)
    return m + math.log(s)


@njit
def weighted_row_lse(x, w):
    t = 0.0
    for r in range(x.shape[0]):
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            if x[r, j] > m:
                m = x[r, j]
        s = 0.0
        for j in range(x.shape[1]):
            s += math.exp(x[r, j] - m)
        t += w[r] * (m + math.log(s))
    return t


@njit
def softmax(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        m = max(m, x[i])
    e = np.empty_like(x)
    s = 0.0
    for i in range(x.shape[0]):
        e[i] = math.exp(x[i] - m)
        s += e[i]
    for i in range(x.shape[0]):
        e[i] /= s
    return e


@njit
def row_softmax(x):
    out = np.empty_like(x)
    for r in range(x.shape[0]):
        m = x[r, 0]
        for j in range(1, x.shape[1]):
            m = max(m, x[r, j])
        s = 0.0
        for j in range(x.shape[1]):
            out[r, j] = math.exp(x[r, j] - m)
            s += out[r, j]
        for j in range(x.shape[1]):
            out[r, j] /= s
    return out


def _lse(x):
    return jax.scipy.special.logsumexp(x)


def _weighted_row_lse(x, w):
    return jnp.sum(w * jax.scipy.special.logsumexp(x, axis=1))


GRADIENT_CASES = [
    ("if-based running max", lse_if, _lse),
    ("max()-based running max", lse_builtin_max, _lse),
    ("running min", softmin, lambda x: -_lse(-x)),
]


@pytest.mark.parametrize("name, f, twin", GRADIENT_CASES, ids=[c[0] for c in GRADIENT_CASES])
def test_stable_logsumexp_gradient(name, f, twin) -> None:
    x = X.copy()
    want = np.asarray(jax.grad(twin)(x.copy()))
    np.testing.assert_allclose(pyjlad.gradient(f, x), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, X)


def test_running_max_continued_over_a_second_array() -> None:
    x, y = X.copy(), Y.copy()
    want = jax.grad(lambda a, b: _lse(jnp.concatenate([a, b])), argnums=(0, 1))(x.copy(), y.copy())
    got = pyjlad.gradient(lse_of_two, x, y, wrt=(0, 1))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, np.asarray(w), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, X)
    np.testing.assert_array_equal(y, Y)


def test_row_wise_logsumexp_gradient_2d() -> None:
    x, w = M.copy(), WEIGHTS.copy()
    want = np.asarray(jax.grad(_weighted_row_lse)(x.copy(), w))
    np.testing.assert_allclose(pyjlad.gradient(weighted_row_lse, x, w), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, M)


def test_float32_logsumexp_gradient() -> None:
    x = X.astype(np.float32)
    want = np.asarray(jax.grad(_lse)(x.astype(np.float64)))
    got = pyjlad.gradient(lse_if, x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


def test_softmax_jacobian_both_modes() -> None:
    x = X.copy()
    want = np.asarray(jax.jacrev(jax.nn.softmax)(x.copy()))
    for mode in ("reverse", "forward"):
        np.testing.assert_allclose(pyjlad.jacobian(softmax, x, mode=mode), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, X)


def test_row_softmax_vjp_2d() -> None:
    x = M.copy()
    cotangent = RNG.normal(size=M.shape)
    value, pullback = jax.vjp(lambda a: jax.nn.softmax(a, axis=1), x.copy())
    got_value, (got,) = pyjlad.vjp(row_softmax, (x,), cotangent)
    np.testing.assert_allclose(got_value, np.asarray(value), rtol=1e-13)
    np.testing.assert_allclose(got, np.asarray(pullback(cotangent)[0]), rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(x, M)


def test_logsumexp_hvp() -> None:
    x, v = X.copy(), RNG.normal(size=X.shape)
    want = np.asarray(jax.jvp(jax.grad(_lse), (x.copy(),), (v,))[1])
    np.testing.assert_allclose(pyjlad.hvp(lse_builtin_max, (x,), v), want, rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(x, X)


def test_row_wise_logsumexp_hvp_2d() -> None:
    x, w, v = M.copy(), WEIGHTS.copy(), RNG.normal(size=M.shape)
    want = np.asarray(jax.jvp(lambda a: jax.grad(_weighted_row_lse)(a, w), (x.copy(),), (v,))[1])
    np.testing.assert_allclose(pyjlad.hvp(weighted_row_lse, (x, w), v), want, rtol=1e-11, atol=1e-14)
    np.testing.assert_array_equal(x, M)


# ------------------------------------------------------------------ item 7: N-body leapfrog
def _nbody(error_model: str):
    @njit(error_model=error_model)
    def accelerations(pos, mass, acc):
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

    @njit(error_model=error_model)
    def energy(pos, vel, mass):
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

    @njit(error_model=error_model)
    def leapfrog(pos0, vel0, mass, dt, steps):
        pos = pos0.copy()
        vel = vel0.copy()
        acc = np.zeros_like(pos0)
        accelerations(pos, mass, acc)
        for _ in range(steps):
            vel += 0.5 * dt * acc
            pos += dt * vel
            accelerations(pos, mass, acc)
            vel += 0.5 * dt * acc
        return energy(pos, vel, mass)

    return leapfrog


LEAPFROG = {model: _nbody(model) for model in ("python", "numpy")}


def _leapfrog_jax(pos, vel, mass, dt, steps):
    def accelerations(p):
        diff = p[None, :, :] - p[:, None, :]
        r2 = jnp.sum(diff * diff, axis=-1) + 0.01
        d = jnp.where(jnp.eye(p.shape[0], dtype=bool), 0.0, mass[None, :] / (r2 * jnp.sqrt(r2)))
        return jnp.sum(d[:, :, None] * diff, axis=1)

    def step(_, state):
        pos, vel, acc = state
        vel = vel + 0.5 * dt * acc
        pos = pos + dt * vel
        acc = accelerations(pos)
        return pos, vel + 0.5 * dt * acc, acc

    pos, vel, _ = jax.lax.fori_loop(0, steps, step, (pos, vel, accelerations(pos)))
    diff = pos[None, :, :] - pos[:, None, :]
    inv = 1.0 / jnp.sqrt(jnp.sum(diff * diff, axis=-1) + 0.01)
    upper = jnp.triu(jnp.ones_like(inv), 1)
    kinetic = 0.5 * jnp.sum(mass * jnp.sum(vel * vel, axis=1))
    return kinetic - jnp.sum(upper * mass[:, None] * mass[None, :] * inv)


POS = RNG.normal(size=(4, 3))
VEL = 0.3 * RNG.normal(size=(4, 3))
MASS = RNG.uniform(0.5, 1.5, 4)
DT, STEPS = 0.01, 8


@pytest.mark.parametrize("error_model", ["python", "numpy"])
def test_leapfrog_gradient_wrt_positions_and_velocities(error_model: str) -> None:
    pos, vel, mass = POS.copy(), VEL.copy(), MASS.copy()
    grad = jax.jit(jax.grad(_leapfrog_jax, argnums=(0, 1)), static_argnums=(3, 4))
    want = grad(pos.copy(), vel.copy(), mass.copy(), DT, STEPS)
    value, (gpos, gvel) = pyjlad.value_and_gradient(LEAPFROG[error_model], pos, vel, mass, DT, STEPS, wrt=(0, 1))
    assert value == pytest.approx(float(_leapfrog_jax(POS, VEL, MASS, DT, STEPS)), rel=1e-13)
    np.testing.assert_allclose(gpos, np.asarray(want[0]), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(gvel, np.asarray(want[1]), rtol=1e-11, atol=1e-13)
    for a, b in ((pos, POS), (vel, VEL), (mass, MASS)):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("error_model", ["python", "numpy"])
def test_leapfrog_hvp_wrt_positions(error_model: str) -> None:
    pos, vel, mass = POS.copy(), VEL.copy(), MASS.copy()
    v = RNG.normal(size=POS.shape)
    grad = jax.grad(lambda p: _leapfrog_jax(p, vel.copy(), mass.copy(), DT, STEPS))
    want = np.asarray(jax.jit(lambda p, t: jax.jvp(grad, (p,), (t,))[1])(pos.copy(), v))
    got = pyjlad.hvp(LEAPFROG[error_model], (pos, vel, mass, DT, STEPS), v, wrt=0)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    for a, b in ((pos, POS), (vel, VEL), (mass, MASS)):
        np.testing.assert_array_equal(a, b)


@njit
def _inverse_distance_sum(pos, steps):
    # Temporaries released on the division-by-zero path, as in the integrator.
    e = 0.0
    for _ in range(steps):
        shifted = pos + 1.0
        for i in range(pos.shape[0]):
            for j in range(i + 1, pos.shape[0]):
                d = shifted[j] - shifted[i]
                e += 1.0 / (d * d)
    return e


def test_a_real_division_by_zero_is_still_reported() -> None:
    # The status now travels through memory: an error the function raises still reaches the caller.
    ok = np.array([0.0, 1.0, 3.0])
    g = pyjlad.gradient(_inverse_distance_sum, ok, 2)
    d = ok[None, :] - ok[:, None]
    with np.errstate(divide="ignore"):
        pair = np.where(np.triu(np.ones((3, 3)), 1) > 0, -2.0 / d ** 3, 0.0)
    np.testing.assert_allclose(g, 2 * (pair.sum(axis=0) - pair.sum(axis=1)), rtol=1e-13)
    with pytest.raises(ZeroDivisionError):
        pyjlad.gradient(_inverse_distance_sum, np.array([0.0, 1.0, 1.0]), 2)
