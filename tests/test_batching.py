"""Batched derivatives on all cores: ``pyjlad.vmap`` (issue 16, part 2).

Per-sample gradients computed in an ``@njit(parallel=True)`` ``prange`` loop. Oracles:
JAX in float64 (``jax.vmap(jax.grad(f))``) on twins written with ``jax.numpy``, evaluated
on copies of the inputs taken before the call, and hand-derived formulas; the batched
results must also equal a serial ``@njit`` loop calling the same derivative, bit for bit.
The caller's arrays are checked unchanged afterwards.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
from numba import njit

import pyjlad

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
jax.config.update("jax_enable_x64", True)

ROOT = Path(__file__).resolve().parents[1]
RNG = np.random.default_rng(1617)


# ------------------------------------------------------------------ functions and their JAX twins
@njit
def log_likelihood(x, y, theta):
    """One sample's logistic-regression log-likelihood: y z - log(1 + e^z), z = x . theta."""
    z = 0.0
    for j in range(x.shape[0]):
        z += x[j] * theta[j]
    return y * z - math.log1p(math.exp(z))


def log_likelihood_jax(x, y, theta):
    z = jnp.dot(x, theta)
    return y * z - jnp.log1p(jnp.exp(z))


@njit
def mlp(x, w, v):
    """A one-hidden-layer network's output, sum_h v_h tanh(sum_j w_hj x_j), squared."""
    out = 0.0
    for h in range(w.shape[0]):
        a = 0.0
        for j in range(w.shape[1]):
            a += w[h, j] * x[j]
        out += v[h] * math.tanh(a)
    return out * out


def mlp_jax(x, w, v):
    return jnp.dot(v, jnp.tanh(w @ x)) ** 2


@njit
def quadratic_form(x, a):
    """x^T A x with an array parameter A."""
    s = 0.0
    for i in range(x.shape[0]):
        for j in range(x.shape[0]):
            s += x[i] * a[i, j] * x[j]
    return s


@njit
def smooth_bump(x, w):
    """Array temporaries of 160 KB per sample: the sweep takes its blocks from the pool."""
    t = np.sin(x * w)
    u = np.exp(-t * t)
    return np.sum(u * x)


def smooth_bump_jax(x, w):
    t = jnp.sin(x * w)
    return jnp.sum(jnp.exp(-t * t) * x)


@njit
def guarded(x):
    if x[0] < 0.0:
        raise ValueError("x[0] must be non-negative")
    return np.sum(x * x)


def _sigmoid(z):
    return 1.0 / (1.0 + np.exp(-z))


def _serial(derivative, in_axes):
    """A serial @njit loop over the samples calling ``derivative``: the reference the parallel loop must equal."""
    if in_axes == (0, 0, None):
        @njit
        def loop(x, y, theta):
            out = np.empty_like(x)
            for i in range(x.shape[0]):
                out[i] = derivative(x[i], y[i], theta)
            return out
        return loop
    raise AssertionError(in_axes)


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-12, atol=1e-12)


def _logistic_data(n=257, d=6):
    x = RNG.normal(size=(n, d))
    theta = RNG.normal(size=d) * 0.5
    y = (RNG.random(n) < _sigmoid(x @ theta)).astype(np.float64)
    return x, y, theta


# ------------------------------------------------------------------ per-sample gradients against JAX
def test_logistic_per_sample_gradients_match_jax_hand_formula_and_serial_loop():
    x, y, theta = _logistic_data()
    before = (x.copy(), y.copy(), theta.copy())
    oracle = jax.vmap(jax.grad(log_likelihood_jax, argnums=2), in_axes=(0, 0, None))(
        *(jnp.asarray(a.copy()) for a in before))
    hand = before[0] * (before[1] - _sigmoid(before[0] @ before[2]))[:, None]
    df = pyjlad.grad(log_likelihood, wrt=2)
    got = pyjlad.vmap(df, in_axes=(0, 0, None))(x, y, theta)
    assert got.shape == x.shape and got.dtype == np.float64
    _close(got, oracle)
    _close(got, hand)
    np.testing.assert_array_equal(got, _serial(df, (0, 0, None))(x, y, theta))
    for now, then in zip((x, y, theta), before):
        np.testing.assert_array_equal(now, then)


def test_value_and_grad_with_a_tuple_wrt_stacks_each_result():
    x, y, theta = _logistic_data(n=64, d=4)
    before = (x.copy(), y.copy(), theta.copy())
    jx, jy, jt = (jnp.asarray(a.copy()) for a in before)
    values_oracle = jax.vmap(log_likelihood_jax, in_axes=(0, 0, None))(jx, jy, jt)
    gt_oracle, gx_oracle = jax.vmap(jax.grad(log_likelihood_jax, argnums=(2, 0)), in_axes=(0, 0, None))(jx, jy, jt)
    values, (g_theta, g_x) = pyjlad.vmap(pyjlad.value_and_grad(log_likelihood, wrt=(2, 0)),
                                         in_axes=(0, 0, None))(x, y, theta)
    assert values.shape == (64,) and g_theta.shape == (64, 4) and g_x.shape == (64, 4)
    _close(values, values_oracle)
    _close(g_theta, gt_oracle)
    _close(g_x, gx_oracle)
    for now, then in zip((x, y, theta), before):
        np.testing.assert_array_equal(now, then)


def test_mlp_gradients_with_matrix_parameters_match_jax_and_serial():
    n, d, h = 96, 5, 7
    x = RNG.normal(size=(n, d))
    w = RNG.normal(size=(h, d)) * 0.4
    v = RNG.normal(size=h)
    before = (x.copy(), w.copy(), v.copy())
    gw_oracle, gv_oracle = jax.vmap(jax.grad(mlp_jax, argnums=(1, 2)), in_axes=(0, None, None))(
        *(jnp.asarray(a.copy()) for a in before))
    df = pyjlad.grad(mlp, wrt=(1, 2))
    gw, gv = pyjlad.vmap(df, in_axes=(0, None, None))(x, w, v)
    assert gw.shape == (n, h, d) and gv.shape == (n, h)
    _close(gw, gw_oracle)
    _close(gv, gv_oracle)

    @njit
    def serial(x, w, v):
        gw = np.empty((x.shape[0],) + w.shape)
        gv = np.empty((x.shape[0],) + v.shape)
        for i in range(x.shape[0]):
            gw[i], gv[i] = df(x[i], w, v)
        return gw, gv

    sw, sv = serial(x, w, v)
    np.testing.assert_array_equal(gw, sw)
    np.testing.assert_array_equal(gv, sv)
    for now, then in zip((x, w, v), before):
        np.testing.assert_array_equal(now, then)


def test_quadratic_form_per_matrix_gradients_match_hand_formula():
    """Mapped over the matrix: d(x^T A x)/dA = x x^T for each A_i, d/dx = (A + A^T) x."""
    n, d = 40, 4
    a = RNG.normal(size=(n, d, d))
    x = RNG.normal(size=d)
    before = (x.copy(), a.copy())
    gx, ga = pyjlad.vmap(pyjlad.grad(quadratic_form, wrt=(0, 1)), in_axes=(None, 0))(x, a)
    _close(ga, np.broadcast_to(np.outer(before[0], before[0]), (n, d, d)))
    _close(gx, np.einsum("nij,j->ni", before[1] + before[1].transpose(0, 2, 1), before[0]))
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(a, before[1])


def test_pool_allocating_sweeps_in_parallel_equal_the_serial_loop_every_time():
    """Each sample's sweep takes 160 KB blocks from the shared pool concurrently; repeated runs agree bit for bit."""
    x = RNG.normal(size=(48, 20_000))
    before = x.copy()
    oracle = jax.vmap(jax.grad(smooth_bump_jax), in_axes=(0, None))(jnp.asarray(before), 0.7)
    df = pyjlad.grad(smooth_bump)
    batched = pyjlad.vmap(df, in_axes=(0, None))

    @njit
    def serial(x, w):
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = df(x[i], w)
        return out

    reference = serial(x, 0.7)
    _close(reference, oracle)
    for _ in range(4):
        np.testing.assert_array_equal(batched(x, 0.7), reference)
    np.testing.assert_array_equal(x, before)


def test_strided_read_only_and_fortran_inputs_are_left_alone():
    x, y, theta = _logistic_data(n=50, d=8)
    wide = np.asfortranarray(np.repeat(x, 2, axis=1))
    strided = wide[:, ::2]  # columns of a Fortran array: each sample is a strided view
    y_ro = y.copy()
    y_ro.setflags(write=False)
    theta_ro = theta.copy()
    theta_ro.setflags(write=False)
    before = (strided.copy(), y.copy(), theta.copy(), wide.copy())
    oracle = jax.vmap(jax.grad(log_likelihood_jax, argnums=(0, 2)), in_axes=(0, 0, None))(
        *(jnp.asarray(a.copy()) for a in before[:3]))
    gx, gt = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=(0, 2)), in_axes=(0, 0, None))(strided, y_ro, theta_ro)
    _close(gx, oracle[0])
    _close(gt, oracle[1])
    np.testing.assert_array_equal(wide, before[3])
    np.testing.assert_array_equal(theta_ro, before[2])


def test_a_mapped_float_argument_gives_a_vector_of_derivatives():
    @njit
    def f(a, b):
        return math.sin(a) * b + a * a * b

    a = RNG.normal(size=33)
    before = a.copy()
    got = pyjlad.vmap(pyjlad.grad(f), in_axes=(0, None))(a, 1.5)
    _close(got, 1.5 * (np.cos(before) + 2 * before))
    np.testing.assert_array_equal(a, before)


def test_in_axes_zero_for_all_and_a_list_are_accepted():
    x, y, theta = _logistic_data(n=20, d=3)
    thetas = np.broadcast_to(theta, x.shape).copy()
    want = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=(0, 0, None))(x, y, theta)
    got = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2))(x, y, thetas)
    np.testing.assert_array_equal(got, want)
    got_list = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=[0, 0, None])(x, y, theta)
    np.testing.assert_array_equal(got_list, want)


def test_a_plain_njit_function_is_batched_too():
    x, y, theta = _logistic_data(n=30, d=3)
    got = pyjlad.vmap(log_likelihood, in_axes=(0, 0, None))(x, y, theta)
    z = x @ theta
    _close(got, y * z - np.log1p(np.exp(z)))


def test_a_sample_that_raises_raises_what_the_serial_loop_raises():
    x = np.abs(RNG.normal(size=(200, 3)))
    x[[137, 171], 0] = -1.0
    batched = pyjlad.vmap(pyjlad.grad(guarded))
    with pytest.raises(ValueError, match="x\\[0\\] must be non-negative") as info:
        batched(x)
    assert any("sample 137" in note for note in getattr(info.value, "__notes__", []))
    x[[137, 171], 0] = 1.0
    _close(batched(x), 2 * x)


def test_every_failing_call_raises_the_samples_own_exception():
    """A sample raising on the calling thread left its exception set there, and from the second failing call in a
    process on, the loop's call failed with Numba's ``SystemError`` ("returned a result with an exception set"):
    ``except ValueError`` no longer caught it (found 2026-12-04, with a sample at index 1 of 2)."""
    batched, plain = pyjlad.vmap(pyjlad.grad(guarded)), pyjlad.vmap(guarded)
    for bad in (1, 2, 7, 39):
        x = np.abs(RNG.normal(size=(40, 3)))
        x[bad, 0] = -1.0
        for _ in range(3):
            for f in (batched, plain):
                with pytest.raises(ValueError, match="x\\[0\\] must be non-negative") as info:
                    f(x)
                assert any(f"sample {bad}" in note for note in getattr(info.value, "__notes__", []))


@njit
def which_thread(x, theta):
    """The Numba thread a sample runs on (plus a derivative call, so the loop is the grad loop's shape)."""
    return numba.get_thread_id() + 0.0 * x[0] * theta[0]


def test_samples_are_spread_over_every_numba_thread():
    """Numba's static schedule gives each thread a share of the samples: all thread ids appear."""
    threads = numba.get_num_threads()
    if threads < 2:
        pytest.skip("Numba has one thread here (NUMBA_NUM_THREADS=1): nothing to spread over")
    x, _, theta = _logistic_data(n=1000, d=3)
    ids = pyjlad.vmap(which_thread, in_axes=(0, None))(x, theta)
    assert set(np.unique(ids).astype(int)) == set(range(threads))
    assert numba.threading_layer() in {"tbb", "omp", "workqueue"}


# ------------------------------------------------------------------ bad arguments
BAD_IN_AXES = [(1, pyjlad.ArgumentError, "leading axis only"), (-1, pyjlad.ArgumentError, "leading axis only"),
               ("0", pyjlad.ArgumentTypeError, "0 or None"), ((0, True), pyjlad.ArgumentTypeError, "0 or None")]


@pytest.mark.parametrize(("in_axes", "error", "message"), BAD_IN_AXES)
def test_bad_in_axes_are_refused_when_made(in_axes, error, message):
    with pytest.raises(error, match=message):
        pyjlad.vmap(pyjlad.grad(guarded), in_axes=in_axes)


def test_out_axes_other_than_zero_and_non_callables_are_refused():
    with pytest.raises(pyjlad.ArgumentError, match="axis 0 only"):
        pyjlad.vmap(pyjlad.grad(guarded), out_axes=1)
    with pytest.raises(pyjlad.ArgumentTypeError, match="needs a callable"):
        pyjlad.vmap(3.0)


def test_functions_numba_cannot_call_are_refused_when_batched():
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="Numba can call from @njit code"):
        pyjlad.vmap(lambda x: x)
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="Numba can call from @njit code"):
        pyjlad.vmap(pyjlad.vmap(pyjlad.grad(guarded)))


def _bad_call(case):
    x, y, theta = _logistic_data(n=10, d=3)
    batched = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=(0, 0, None))
    calls = {
        "length": lambda: batched(x, y),
        "sizes": lambda: batched(x, y[:7], theta),
        "scalar": lambda: pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=(0, 0, None))(x, 1.0, theta),
        "none": lambda: pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=None)(x[0], y[0], theta),
        "empty": lambda: batched(x[:0], y[:0], theta),
        "keywords": lambda: batched(x, y, theta=theta),
        "untyped": lambda: batched(x, y, object()),
    }
    return calls[case]


@pytest.mark.parametrize(("case", "error", "message"), [
    ("length", pyjlad.ArgumentError, "3 entries but the batched function was called with 2"),
    ("sizes", pyjlad.ArgumentError, "different leading sizes"),
    ("scalar", pyjlad.ArgumentError, "argument 1 is mapped over axis 0"),
    ("none", pyjlad.ArgumentError, "maps no argument"),
    ("empty", pyjlad.ArgumentError, "0 samples"),
    ("keywords", pyjlad.ArgumentTypeError, "positional arguments only"),
    ("untyped", pyjlad.ArgumentTypeError, "argument 2 of the batched function is a object"),
])
def test_bad_calls_get_clear_errors(case, error, message):
    with pytest.raises(error, match=message):
        _bad_call(case)()


def test_a_sample_the_function_cannot_take_is_refused_in_the_users_terms():
    x, y, theta = _logistic_data(n=10, d=3)
    with pytest.raises(pyjlad.UnsupportedFunctionError, match="cannot call"):
        pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=2), in_axes=(0, None, None))(x, y, theta)


# ------------------------------------------------------------------ the example
def test_per_sample_gradients_example_runs():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "per_sample_gradients.py")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "per-sample gradients match" in done.stdout


# ------------------------------------------------------------------ products batched: jvp_fn, vjp_fn, hvp_fn
@njit
def wave(x, w):
    """A float result: w sum_j sin(x_j) x_j^2."""
    return w * np.sum(np.sin(x) * x * x)


def wave_jax(x, w):
    return w * jnp.sum(jnp.sin(x) * x * x)


@njit
def field(x, w):
    """An array result coupling the elements: out_j = w sin(x_j) x_{d-1-j}."""
    out = np.empty_like(x)
    for j in range(x.shape[0]):
        out[j] = w * math.sin(x[j]) * x[x.shape[0] - 1 - j]
    return out


def field_jax(x, w):
    return w * jnp.sin(x) * x[::-1]


@njit
def shifted(x, k):
    """An integer argument (no derivative: its cotangent is None): sum_j x_j x_{(j+k) mod d}."""
    s = 0.0
    for j in range(x.shape[0]):
        s += x[j] * x[(j + k) % x.shape[0]]
    return s


def shifted_jax(x, k):
    return jnp.sum(x * jnp.roll(x, -k))


def _unchanged(arrays, before):
    for now, then in zip(arrays, before):
        np.testing.assert_array_equal(now, then)


@pytest.mark.parametrize(("f", "f_jax"), [(wave, wave_jax), (field, field_jax)], ids=["float", "array"])
def test_vmap_of_jvp_fn_over_primals_and_tangents_matches_jax_and_the_serial_loop(f, f_jax):
    """in_axes is a prefix of the (primals, tangents) tuples, as JAX's; None tangents hold an argument constant."""
    n, d, w = 37, 5, 1.3
    x, t = RNG.normal(size=(n, d)), RNG.normal(size=(n, d))
    before = (x.copy(), t.copy())
    want_v, want_t = jax.vmap(lambda p, tan: jax.jvp(f_jax, p, tan), in_axes=((0, None), (0, None)))(
        (jnp.asarray(before[0]), w), (jnp.asarray(before[1]), 0.0))
    jf = pyjlad.jvp_fn(f)
    values, tangents = pyjlad.vmap(jf, in_axes=((0, None), (0, None)))((x, w), (t, None))
    assert values.shape == want_v.shape and tangents.shape == want_t.shape == ((n,) if f is wave else (n, d))
    _close(values, want_v)
    _close(tangents, want_t)

    @njit
    def serial(x, w, t):
        vs, ts = [], []
        for i in range(x.shape[0]):
            v, tan = jf((x[i], w), (t[i], None))
            vs.append(v)
            ts.append(tan)
        return vs, ts

    serial_v, serial_t = serial(x, w, t)
    np.testing.assert_array_equal(values, np.array(serial_v))
    np.testing.assert_array_equal(tangents, np.array(serial_t))
    _unchanged((x, t), before)


def test_vmap_of_jvp_fn_with_one_axis_for_everything_and_with_only_the_tangents_mapped():
    """``in_axes=0`` maps every array inside the tuples; mapping only the tangents gives Jacobian rows at one point."""
    n, d = 12, 4
    x, w, t, tw = RNG.normal(size=(n, d)), RNG.normal(size=n), RNG.normal(size=(n, d)), RNG.normal(size=n)
    before = (x.copy(), w.copy(), t.copy(), tw.copy())
    jx, jw, jt, jtw = (jnp.asarray(a.copy()) for a in before)
    jf = pyjlad.jvp_fn(wave)
    values, tangents = pyjlad.vmap(jf)((x, w), (t, tw))
    want_v, want_t = jax.vmap(lambda p, tan: jax.jvp(wave_jax, p, tan))((jx, jw), (jt, jtw))
    _close(values, want_v)
    _close(tangents, want_t)
    directions = np.eye(d)
    rows = pyjlad.vmap(jf, in_axes=((None, None), (0, None)))((x[0], 2.0), (directions, None))[1]
    _close(rows, jax.grad(wave_jax)(jx[0], 2.0))
    _unchanged((x, w, t, tw), before)


def test_vmap_of_vjp_fn_stacks_cotangents_and_keeps_none_for_an_integer_argument():
    n, d, k = 25, 6, 2
    x, ct = RNG.normal(size=(n, d)), RNG.normal(size=n)
    before = (x.copy(), ct.copy())

    def vjp_jax(x, c):
        value, pullback = jax.vjp(lambda x: shifted_jax(x, k), x)
        return value, pullback(c)[0]

    want_v, want_ct = jax.vmap(vjp_jax)(jnp.asarray(before[0]), jnp.asarray(before[1]))
    values, (ct_x, ct_k) = pyjlad.vmap(pyjlad.vjp_fn(shifted), in_axes=((0, None), 0))((x, k), ct)
    assert ct_k is None and ct_x.shape == (n, d)
    _close(values, want_v)
    _close(ct_x, want_ct)
    hand = before[1][:, None] * (np.roll(before[0], -k, axis=1) + np.roll(before[0], k, axis=1))
    _close(ct_x, hand)
    _unchanged((x, ct), before)


def test_vmap_of_hvp_fn_matches_jax_forward_over_reverse():
    n, d, w = 19, 5, 0.7
    x, v = RNG.normal(size=(n, d)), RNG.normal(size=(n, d))
    before = (x.copy(), v.copy())
    want = jax.vmap(lambda x, v: jax.jvp(lambda x: jax.grad(wave_jax)(x, w), (x,), (v,))[1])(
        jnp.asarray(before[0]), jnp.asarray(before[1]))
    got = pyjlad.vmap(pyjlad.hvp_fn(wave), in_axes=((0, None), 0))((x, w), v)
    _close(got, want)
    _unchanged((x, v), before)


@pytest.mark.parametrize(("in_axes", "args", "message"), [
    (((0, None), 0), (np.ones((3, 2)), np.ones((3, 2))), "a tuple in in_axes goes with a tuple argument"),
    (((0, None, None), (0, None)), ((np.ones((3, 2)), 1.0), (np.ones((3, 2)), None)), "tuple of 3 entries"),
    ((0, 0), ((np.ones((3, 2)), 1.0), (np.ones((3, 2)), None)), "argument 0\\[1\\] is mapped over axis 0"),
    (((0, None), (0, None)), ((np.ones((3, 2)), 1.0), (np.ones((4, 2)), None)), "argument 1\\[0\\]: 4"),
    (((None, None), (None, 0)), ((np.ones(2), 1.0), (np.ones(2), None)), "maps no argument"),
])
def test_nested_in_axes_that_do_not_fit_the_arguments_are_refused(in_axes, args, message):
    with pytest.raises(pyjlad.ArgumentError, match=message):
        pyjlad.vmap(pyjlad.jvp_fn(wave), in_axes=in_axes)(*args)


def test_nested_in_axes_entries_are_checked_when_made():
    with pytest.raises(pyjlad.ArgumentError, match="in_axes\\[1\\]\\[0\\] is 1"):
        pyjlad.vmap(pyjlad.jvp_fn(wave), in_axes=((0, None), (1, None)))
    with pytest.raises(pyjlad.ArgumentTypeError, match="in_axes\\[0\\]\\[1\\] must be 0 or None"):
        pyjlad.vmap(pyjlad.jvp_fn(wave), in_axes=[[0, "x"], 0])


# ------------------------------------------------------------------ a vmap called from @njit code
BATCHED_JVP = pyjlad.vmap(pyjlad.jvp_fn(field), in_axes=((0, None), (0, None)))


@pytest.mark.filterwarnings("ignore::numba.NumbaPerformanceWarning")  # the caller itself has no parallel loop
def test_a_vmap_is_callable_from_njit_code_as_a_global_and_an_argument():
    n, d, w = 23, 4, 0.9
    x, t = RNG.normal(size=(n, d)), RNG.normal(size=(n, d))
    before = (x.copy(), t.copy())

    @njit
    def as_global(x, w, t):
        values, tangents = BATCHED_JVP((x, w), (t, None))
        return values + 0.0, tangents * 2.0

    @njit(parallel=True)
    def as_argument(b, x, w, t):
        return b((x, w), (t, None))

    want_v, want_t = BATCHED_JVP((x, w), (t, None))
    got_v, got_t = as_global(x, w, t)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(got_t, 2.0 * want_t)
    got_v, got_t = as_argument(BATCHED_JVP, x, w, t)
    np.testing.assert_array_equal(got_v, want_v)
    np.testing.assert_array_equal(got_t, want_t)
    oracle_t = jax.vmap(lambda x, t: jax.jvp(lambda x: field_jax(x, w), (x,), (t,))[1])(
        jnp.asarray(before[0]), jnp.asarray(before[1]))
    _close(got_t, oracle_t)
    _unchanged((x, t), before)


def test_a_vmap_in_njit_code_raises_what_the_python_call_raises():
    batched = pyjlad.vmap(pyjlad.grad(guarded))

    @njit
    def call(b, x):
        return b(x)

    x = np.abs(RNG.normal(size=(40, 3)))
    _close(call(batched, x), 2 * x)
    x[17, 0] = -1.0
    with pytest.raises(ValueError, match="x\\[0\\] must be non-negative"):
        call(batched, x)
    with pytest.raises(ValueError, match="0 samples"):
        call(batched, x[:0])

    @njit
    def mismatched(x, w, t):
        return BATCHED_JVP((x, w), (t, None))

    with pytest.raises(pyjlad.ArgumentError, match="different numbers of samples"):
        mismatched(np.ones((3, 2)), 1.0, np.ones((4, 2)))


def test_a_vmap_called_from_njit_with_arguments_its_in_axes_do_not_fit_is_a_typing_error():
    @njit
    def flat(x, w, t):
        return BATCHED_JVP(x, t)

    with pytest.raises(numba.core.errors.TypingError, match="a tuple in in_axes goes with a tuple argument"):
        flat(np.ones((3, 2)), 1.0, np.ones((3, 2)))


def test_vmap_of_jacrev_and_jacfwd_matches_jax():
    n, d, w = 9, 4, 1.7
    x = RNG.normal(size=(n, d))
    before = x.copy()
    want = jax.vmap(jax.jacrev(field_jax), in_axes=(0, None))(jnp.asarray(before), w)
    for make in (pyjlad.jacrev, pyjlad.jacfwd):
        got = pyjlad.vmap(make(field), in_axes=(0, None))(x, w)
        assert got.shape == (n, d, d)
        _close(got, want)
    np.testing.assert_array_equal(x, before)


@njit
def doubled(x):
    return 2.0 * x


@njit
def tripled(x):
    return 3.0 * x


def test_two_vmaps_of_the_same_shape_called_from_njit_with_the_same_types_each_run_their_own_function():
    """Their generated loops have the same source: Numba's compile_internal cache (keyed by the code object,
    equal for equal source) must not hand the second the first one's code."""
    by_two, by_three = pyjlad.vmap(doubled), pyjlad.vmap(tripled)
    x = RNG.normal(size=(8, 3))
    np.testing.assert_array_equal(njit(lambda x: by_two(x))(x), 2.0 * x)
    np.testing.assert_array_equal(njit(lambda x: by_three(x))(x), 3.0 * x)


def test_a_vmap_of_a_derivative_made_again_reuses_its_compiled_loop():
    """``pyjlad.vmap(pyjlad.grad(f))(...)`` written inside a loop: each pass makes a new grad and a new vmap,
    whose Numba type is the same, so the parallel loop compiled on the first pass runs on every pass (before,
    each pass compiled it again, about 1.5 s). Different derivatives of the same function keep loops of
    their own: each result against the hand formula."""
    x, y, theta = _logistic_data(n=64)
    before = (x.copy(), y.copy(), theta.copy())
    residual = before[1] - _sigmoid(before[0] @ before[2])
    types = tuple(numba.typeof(a) for a in (x, y, theta))
    runs = {}
    for _ in range(3):
        for wrt, hand in ((2, before[0] * residual[:, None]), (0, residual[:, None] * before[2][None, :])):
            batched = pyjlad.vmap(pyjlad.grad(log_likelihood, wrt=wrt), in_axes=(0, 0, None))
            _close(batched(x, y, theta), hand)
            runs.setdefault(wrt, set()).add(id(batched.loops(types).run))
        pushed = pyjlad.vmap(pyjlad.jvp_fn(log_likelihood), in_axes=((0, 0, None), (None, None, 0)))
        tangents = RNG.normal(size=x.shape)  # one tangent of theta per sample
        _, got = pushed((x, y, theta), (None, None, tangents))
        _close(got, np.sum(before[0] * residual[:, None] * tangents, axis=1))
        runs.setdefault("jvp", set()).add(id(pushed.loops(tuple(numba.typeof(a) for a in (
            (x, y, theta), (None, None, tangents)))).run))
    assert [len(ids) for ids in runs.values()] == [1, 1, 1]
    assert len(set().union(*runs.values())) == 3
    for now, then in zip((x, y, theta), before):
        np.testing.assert_array_equal(now, then)
