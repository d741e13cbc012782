"""Checkpointed time loops (issue 20, part 1): ``pyjlad.checkpointed_loop``.

Oracles: JAX float64 on a ``jax.numpy`` twin of each step run with ``lax.scan``,
and the un-checkpointed pyjlad gradient of the same loop written as one ``@njit``
function (equal to rounding: both reverse the same float operations). Caps are
chosen to force one level (every state stored), two, three, and the smallest
schedule; the schedule's counted primal steps are checked against its plan.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numba import njit

import pyjlad
from pyjlad.checkpoint_schedule import _schedule, plan, smallest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

H = 0.01


# ------------------------------------------------------------------ steps, losses and their JAX twins
@njit
def lorenz(s, rho):
    return np.array([10.0 * (s[1] - s[0]), s[0] * (rho - s[2]) - s[1], s[0] * s[1] - 8.0 / 3.0 * s[2]])


@njit
def rk4(s, rho, k):
    k1 = lorenz(s, rho)
    k2 = lorenz(s + 0.5 * H * k1, rho)
    k3 = lorenz(s + 0.5 * H * k2, rho)
    k4 = lorenz(s + H * k3, rho)
    return s + H / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


def rk4_jax(s, rho, k):
    def f(s):
        return jnp.array([10.0 * (s[1] - s[0]), s[0] * (rho - s[2]) - s[1], s[0] * s[1] - 8.0 / 3.0 * s[2]])
    k1 = f(s)
    k2 = f(s + 0.5 * H * k1)
    k3 = f(s + 0.5 * H * k2)
    k4 = f(s + H * k3)
    return s + H / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)


@njit
def heat(u, kappa, k):
    n, m = u.shape
    v = np.empty_like(u)
    for i in range(n):
        for j in range(m):
            up = u[i - 1, j] if i > 0 else 0.0
            down = u[i + 1, j] if i < n - 1 else 0.0
            left = u[i, j - 1] if j > 0 else 0.0
            right = u[i, j + 1] if j < m - 1 else 0.0
            v[i, j] = u[i, j] + 0.2 * kappa * (up + down + left + right - 4.0 * u[i, j])
    return v


def heat_jax(u, kappa, k):
    p = jnp.pad(u, 1)
    return u + 0.2 * kappa * (p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u)


@njit
def forced(u, p, k):
    """A step using k (time-dependent forcing) with array params."""
    return u + 0.05 * (p * np.sin(u) + math.cos(0.3 * k) * p[::-1])


def forced_jax(u, p, k):
    return u + 0.05 * (p * jnp.sin(u) + jnp.cos(0.3 * k) * p[::-1])


@njit
def sumsq(u):
    return np.sum(u * u)


@njit
def weighted(u):
    return u[0] * u[0] + 0.5 * u[1] - np.sum(np.cos(u))


def weighted_jax(u):
    return u[0] * u[0] + 0.5 * u[1] - jnp.sum(jnp.cos(u))


def sumsq_jax(u):
    return jnp.sum(u * u)


def whole_loop(step, loss):
    """The loop as one @njit function: the un-checkpointed pyjlad gradient's function."""
    @njit
    def whole(u, p, n):
        for k in range(n):
            u = step(u, p, k)
        return loss(u)
    return whole


def jax_grad(step, loss, u0, p, n):
    def f(u, p):
        def body(u, k):
            return step(u, p, k), None
        u, _ = jax.lax.scan(body, u, jnp.arange(n))
        return loss(u)
    return jax.jit(jax.value_and_grad(f, argnums=(0, 1)))(u0, p)


CASES = {
    "lorenz-rk4": (rk4, weighted, rk4_jax, weighted_jax, lambda: (np.array([1.0, 1.5, 20.0]), 28.0)),
    "heat-2d": (heat, sumsq, heat_jax, sumsq_jax,
                lambda: (np.random.default_rng(3).uniform(0, 1, (5, 6)), 0.9)),
    "forcing-k": (forced, sumsq, forced_jax, sumsq_jax,
                  lambda: (np.linspace(-1.0, 1.0, 4), np.array([0.3, -0.7, 1.1, 0.5]))),
}


def close(a, b, rtol=1e-11):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=1e-12)


def caps(n, u0, p):
    """Caps forcing every state stored, two levels, three levels (where those differ) and the smallest schedule."""
    pb = np.asarray(p).nbytes
    out = {"everything": 2**40, "smallest": smallest(n, u0.nbytes, pb).memory_bytes}
    for levels in (2, 3):
        cap = _schedule(n, levels, u0.nbytes, pb).memory_bytes
        if plan(n, u0.nbytes, pb, cap).levels == levels:
            out[f"{levels}-levels"] = cap
    return out


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("n", [0, 1, 2, 7, 100, 101])
def test_gradient_matches_plain_pyjlad_and_jax(case, n):
    step, loss, step_j, loss_j, make = CASES[case]
    u0, p = make()
    u0_before, p_before = u0.copy(), np.copy(p)
    want_value, (want_du, want_dp) = jax_grad(step_j, loss_j, u0.copy(), np.copy(p), n)
    plain_value, (plain_du, plain_dp) = pyjlad.value_and_grad(whole_loop(step, loss), wrt=(0, 1))(u0, p, n)
    for name, cap in caps(n, u0, p).items():
        loop = pyjlad.checkpointed_loop(step, loss, n, max_memory=cap)
        value, (du, dp) = loop.value_and_grad(u0, p)
        close(value, want_value)
        close(du, want_du, rtol=1e-9)
        close(dp, want_dp, rtol=1e-9)
        close(du, plain_du)
        close(dp, plain_dp)
        assert du.shape == u0.shape and du.dtype == u0.dtype
        assert isinstance(dp, float) == isinstance(p, float)
        close(loop(u0, p), want_value)
        done = loop.last_schedule
        planned = loop.schedule(u0, p)
        assert done == planned, name
        assert planned.memory_bytes <= cap
        if name == "everything":
            assert planned.levels == 1 and planned.recomputed_steps == 0 and planned.states_stored == n
        if name.endswith("levels"):
            assert planned.levels == int(name[0]), (name, planned)
        np.testing.assert_array_equal(u0, u0_before)
        np.testing.assert_array_equal(p, p_before)


def test_recomputation_grows_with_levels():
    u0, p = CASES["lorenz-rk4"][4]()
    n = 1000
    seen = []
    for cap in (2**40, 3000, 1200, smallest(n, u0.nbytes, 8).memory_bytes):
        s = pyjlad.checkpointed_loop(rk4, weighted, n, max_memory=cap).schedule(u0, p)
        seen.append((s.levels, s.states_stored, s.recomputed_steps))
        assert s.recomputed_steps <= (s.levels - 1) * n
    assert [x[0] for x in seen] == sorted(x[0] for x in seen)
    assert seen[0] == (1, n, 0) and seen[-1][1] < 25


def test_float32_state():
    @njit
    def step32(u, a, k):
        return u * a + np.float32(0.5)

    u0 = np.array([1.0, -2.0, 0.5], dtype=np.float32)
    loop = pyjlad.checkpointed_loop(step32, sumsq, 9, max_memory=150)
    value, (du, da) = loop.value_and_grad(u0, np.float32(0.9))
    want_value, (want_du, want_da) = jax_grad(lambda u, a, k: u * a + 0.5, sumsq_jax, u0.astype(np.float64), 0.9, 9)
    assert du.dtype == np.float32 and loop.last_schedule.levels == 2
    close(value, want_value, rtol=1e-5)
    close(du, want_du, rtol=1e-5)
    close(da, want_da, rtol=1e-5)


# ------------------------------------------------------------------ errors in the user's terms
@njit
def wrong_shape(u, p, k):
    return u[:-1] * p


@njit
def wrong_dtype(u, p, k):
    return (u * p).astype(np.float32)


@njit
def in_place(u, p, k):
    u[0] += p
    return u


@njit
def array_loss(u):
    return u * 2.0


@njit
def scale(u, p, k):
    return u * p


def test_errors():
    u0 = np.ones(3)
    with pytest.raises(pyjlad.ArgumentError, match="shape"):
        pyjlad.checkpointed_loop(wrong_shape, sumsq, 4).value_and_grad(u0, 2.0)
    with pytest.raises(pyjlad.ArgumentError, match="dtype float64"):
        pyjlad.checkpointed_loop(wrong_dtype, sumsq, 4).value_and_grad(u0, 2.0)
    with pytest.raises(pyjlad.ArgumentError, match="modifies its state"):
        pyjlad.checkpointed_loop(in_place, sumsq, 4).value_and_grad(u0, 2.0)
    np.testing.assert_array_equal(u0, np.ones(3))
    with pytest.raises(pyjlad.ArgumentTypeError, match="loss must return a float"):
        pyjlad.checkpointed_loop(scale, array_loss, 4).value_and_grad(u0, 2.0)
    for bad in (-1, 2.5, True):
        with pytest.raises(pyjlad.ArgumentError, match="n_steps"):
            pyjlad.checkpointed_loop(scale, sumsq, bad)
    with pytest.raises(pyjlad.ArgumentError, match="max_memory"):
        pyjlad.checkpointed_loop(scale, sumsq, 4, max_memory=0)
    with pytest.raises(pyjlad.ArgumentTypeError, match="step must be"):
        pyjlad.checkpointed_loop(3, sumsq, 4)
    loop = pyjlad.checkpointed_loop(scale, sumsq, 4)
    with pytest.raises(pyjlad.ArgumentTypeError, match="state0"):
        loop.value_and_grad([1.0, 2.0], 2.0)
    with pytest.raises(pyjlad.ArgumentTypeError, match="state0"):
        loop.value_and_grad(np.ones(3, dtype=np.int64), 2.0)
    with pytest.raises(pyjlad.ArgumentTypeError, match="params"):
        loop.value_and_grad(u0, 2)
    need = smallest(1000, u0.nbytes, 8).memory_bytes
    with pytest.raises(pyjlad.OutOfMemoryError, match=f"needs at least {need} bytes"):
        pyjlad.checkpointed_loop(scale, sumsq, 1000, max_memory=need - 1).value_and_grad(u0, 2.0)
    value, (du, dp) = pyjlad.checkpointed_loop(scale, sumsq, 1000, max_memory=need).value_and_grad(u0, 1.0)
    close(du, 2.0 * u0)
    close(dp, 2000.0 * 3)


@njit
def clip_then_advect(u, c, k):
    """Sets negative entries to zero in place (from some step on: not at step 0), then an upwind step."""
    for i in range(u.size):
        if u[i] < 0.0:
            u[i] = 0.0
    n = u.size
    out = np.empty_like(u)
    for i in range(n):
        out[i] = u[i] - c * (u[i] - u[i - 1]) - 0.3 * np.sin(0.5 * k) * u[(i + 2) % n]
    return out


@njit
def weighted_sum(u):
    return np.sum(u * np.arange(1.0, u.size + 1))


def test_step_writing_its_state_on_later_steps_at_every_level():
    # Before: with more than one level of snapshots, recomputation handed the step a snapshot row, which
    # the in-place clip changed: the gradient was wrong (value right), with one level right.
    def twin(u, c):
        for k in range(40):
            u = jnp.where(u < 0.0, 0.0, u)
            u = u - c * (u - jnp.roll(u, 1)) - 0.3 * jnp.sin(0.5 * k) * jnp.roll(u, -2)
        return jnp.sum(u * jnp.arange(1.0, u.size + 1))

    u0 = np.array([0.1, 0.9, 0.4, 0.05, 0.7, 0.3])
    u_copy = u0.copy()
    want_value, (want_u, want_c) = jax.value_and_grad(twin, argnums=(0, 1))(jnp.asarray(u_copy), 1.3)
    for cap in (10**6, 728, smallest(40, u0.nbytes, 8).memory_bytes):
        loop = pyjlad.checkpointed_loop(clip_then_advect, weighted_sum, 40, max_memory=cap)
        value, (du, dc) = loop.value_and_grad(u0, 1.3)
        close(value, float(want_value))
        close(du, np.asarray(want_u))
        close(dc, float(want_c))
        np.testing.assert_array_equal(u0, u_copy)
    assert len(loop.last_schedule.strides) >= 2  # the smallest cap: several levels


@njit
def two_argument_loss(u, c):
    return np.sum(u) * c


@njit
def two_argument_step(u, c):
    return u * c


def test_wrong_signatures_say_what_is_expected():
    u0 = np.ones(3)
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"loss cannot be called as loss\(state\)"):
        pyjlad.checkpointed_loop(scale, two_argument_loss, 4).value_and_grad(u0, 2.0)
    with pytest.raises(pyjlad.ArgumentTypeError, match=r"step cannot be called as step\(state, params, k\)"):
        pyjlad.checkpointed_loop(two_argument_step, sumsq, 4).value_and_grad(u0, 2.0)


@njit
def _scaling_params_at_step_zero(u, p, k):
    p[0] = p[0] * 1.1
    return u * p[0]


@njit
def _scaling_params_at_step_two(u, p, k):
    if k == 2:
        p[0] = p[0] * 1.1
    return u * p[0]


@pytest.mark.parametrize("step", [_scaling_params_at_step_zero, _scaling_params_at_step_two])
@pytest.mark.parametrize("call", ["value", "value_and_grad"])
def test_a_step_writing_its_params_is_refused(step, call):
    # Rerunning such steps gave silently wrong values and gradients (1.1**20 too large).
    s0, p = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.0])
    s_copy, p_copy = s0.copy(), p.copy()
    loop = pyjlad.checkpointed_loop(step, sumsq, 4)
    with pytest.raises(pyjlad.ArgumentError, match="modifies its params"):
        loop(s0, p) if call == "value" else loop.value_and_grad(s0, p)
    np.testing.assert_array_equal(s0, s_copy)
    np.testing.assert_array_equal(p, p_copy)
