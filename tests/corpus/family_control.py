"""Control flow of real code: running extrema, argmax loops, early exits, while loops with
iteration caps, helpers writing into arrays, swapped buffers, integer indexing.

Each program is a Numba function and a ``jax.numpy`` twin computing the same value; where the
Numba code branches on data, the twin selects with ``jnp.max``/``jnp.argmax``/``jnp.where``.
Sample points keep a margin from every branch switch (:mod:`corpus.margins`).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.margins import away, distinct
from corpus.program import program

FAMILY = "control"
SMOOTH = ("gradient", "hvp")
ARRAY = ("jacobian", "jvp", "vjp")

# ------------------------------------------------------------------ running extrema
@njit
def running_max_if(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
    return m * m + 0.5 * m + 0.1 * s


def running_max_if_jax(x):
    m = jnp.max(x)
    return m * m + 0.5 * m + 0.1 * jnp.sum(x * x)


program(FAMILY, "running-max-if", running_max_if, running_max_if_jax,
        lambda rng: (distinct(rng, 12),), transforms=SMOOTH)


@njit
def running_max_builtin(x):
    m = -np.inf
    s = 0.0
    for i in range(x.shape[0]):
        m = max(m, x[i])
        s += math.sin(x[i])
    return 3.0 * m + s


def running_max_builtin_jax(x):
    return 3.0 * jnp.max(x) + jnp.sum(jnp.sin(x))


program(FAMILY, "running-max-builtin", running_max_builtin, running_max_builtin_jax,
        lambda rng: (distinct(rng, 15),), transforms=SMOOTH)


@njit
def running_min_if(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] < m:
            m = x[i]
    return math.exp(m) + m * m * m


def running_min_if_jax(x):
    m = jnp.min(x)
    return jnp.exp(m) + m ** 3


program(FAMILY, "running-min-if", running_min_if, running_min_if_jax,
        lambda rng: (distinct(rng, 10),), transforms=SMOOTH)


@njit
def running_min_builtin(x, w):
    m = np.inf
    for i in range(x.shape[0]):
        m = min(m, x[i] * w[i])
    return m


def running_min_builtin_jax(x, w):
    return jnp.min(x * w)


def _min_builtin_args(rng):
    w = rng.uniform(0.5, 1.5, 10)
    return distinct(rng, 10) / w, w


program(FAMILY, "running-min-builtin", running_min_builtin, running_min_builtin_jax,
        _min_builtin_args, wrt=(0, 1))


@njit
def running_max_abs_2d(a):
    # The largest absolute entry of a matrix, with its row's sum of squares.
    best = -1.0
    bi = 0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            v = abs(a[i, j])
            if v > best:
                best = v
                bi = i
    s = 0.0
    for j in range(a.shape[1]):
        s += a[bi, j] * a[bi, j]
    return best * s


def running_max_abs_2d_jax(a):
    flat = jnp.argmax(jnp.abs(a))
    bi = flat // a.shape[1]
    return jnp.max(jnp.abs(a)) * jnp.sum(a[bi] ** 2)


def _max_abs_args(rng):
    mags = np.abs(distinct(rng, 20, 0.1, 2.0, 0.04))
    return (mags * rng.choice([-1.0, 1.0], 20)).reshape(4, 5),


program(FAMILY, "running-max-abs-2d", running_max_abs_2d, running_max_abs_2d_jax,
        _max_abs_args, transforms=SMOOTH)


# ------------------------------------------------------------------ argmax / argmin loops
@njit
def argmax_loop(x, y):
    k = 0
    for i in range(1, x.shape[0]):
        if x[i] > x[k]:
            k = i
    return x[k] * y[k] + x[k] ** 2


def argmax_loop_jax(x, y):
    k = jnp.argmax(x)
    return x[k] * y[k] + x[k] ** 2


program(FAMILY, "argmax-loop", argmax_loop, argmax_loop_jax,
        lambda rng: (distinct(rng, 11), rng.standard_normal(11)), wrt=(0, 1))


@njit
def argmin_distance(x, y):
    # The sample closest to a target, scaled by its distance.
    best = np.inf
    k = -1
    for i in range(x.shape[0]):
        d = abs(x[i] - 0.3)
        if d < best:
            best = d
            k = i
    return y[k] * best + y[k] ** 2


def argmin_distance_jax(x, y):
    d = jnp.abs(x - 0.3)
    k = jnp.argmin(d)
    return y[k] * d[k] + y[k] ** 2


def _argmin_args(rng):
    d = np.abs(distinct(rng, 9, 0.1, 1.5, 0.05))
    return 0.3 + d * rng.choice([-1.0, 1.0], 9), rng.standard_normal(9)


program(FAMILY, "argmin-distance", argmin_distance, argmin_distance_jax, _argmin_args,
        wrt=(0, 1))


@njit
def _first_above(x, t):
    for i in range(x.shape[0]):
        if x[i] > t:
            return i
    return x.shape[0] - 1


@njit
def helper_early_return(x):
    k = _first_above(x, 0.5)
    return x[k] ** 3 + x[0] * x[k]


def helper_early_return_jax(x):
    k = jnp.argmax(x > 0.5)
    return x[k] ** 3 + x[0] * x[k]


def _first_above_args(rng):
    x = away(rng, 10, -1.0, 0.4, (), 0.0)
    x[rng.integers(3, 8)] = rng.uniform(0.7, 1.5)
    return x,


program(FAMILY, "helper-early-return", helper_early_return, helper_early_return_jax,
        _first_above_args, transforms=SMOOTH)


# ------------------------------------------------------------------ early exits
def _prefix_args(rng, n=12):
    """Positive steps and a threshold halfway between two partial sums of squares."""
    x = rng.uniform(0.4, 1.0, n)
    cs = np.cumsum(x * x)
    k = int(rng.integers(3, n - 3))
    return x, float(0.5 * (cs[k] + cs[k + 1]))


@njit
def early_exit_break(x, t):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] * x[i]
        if s > t:
            break
    return s * s


def early_exit_break_jax(x, t):
    cs = jnp.cumsum(x * x)
    return cs[jnp.argmax(cs > t)] ** 2


program(FAMILY, "early-exit-break", early_exit_break, early_exit_break_jax, _prefix_args,
        transforms=SMOOTH)


@njit
def early_return_in_loop(x):
    acc = 1.0
    for i in range(x.shape[0]):
        if x[i] < -1.0:
            return acc * x[i]
        acc *= 1.0 + 0.1 * x[i]
    return acc


def early_return_in_loop_jax(x):
    k = jnp.argmax(x < -1.0)
    prod = jnp.concatenate([jnp.ones(1), jnp.cumprod(1.0 + 0.1 * x)])
    return prod[k] * x[k]


def _early_return_args(rng):
    x = away(rng, 12, -0.9, 1.5, (), 0.0)
    x[rng.integers(4, 9)] = rng.uniform(-1.8, -1.2)
    return x,


program(FAMILY, "early-return-in-loop", early_return_in_loop, early_return_in_loop_jax,
        _early_return_args, transforms=SMOOTH)


@njit
def while_prefix_mean(x, t):
    i = 0
    s = 0.0
    q = 0.0
    while i < x.shape[0] and q < t:
        s += x[i]
        q += x[i] * x[i]
        i += 1
    return s / i


def while_prefix_mean_jax(x, t):
    cq = jnp.cumsum(x * x)
    k = jnp.argmax(cq >= t)
    return jnp.cumsum(x)[k] / (k + 1)


program(FAMILY, "while-prefix-mean", while_prefix_mean, while_prefix_mean_jax, _prefix_args,
        transforms=SMOOTH)


@njit
def continue_skip(x):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] < 0.0:
            continue
        s += math.sqrt(x[i]) * x[i]
    return s


def continue_skip_jax(x):
    return jnp.sum(jnp.where(x < 0.0, 0.0, jnp.sqrt(jnp.abs(x)) * x))


program(FAMILY, "continue-skip", continue_skip, continue_skip_jax,
        lambda rng: (away(rng, 14, -2.0, 2.0, (0.0,), 0.1),), transforms=SMOOTH)


@njit
def count_mean_positive(x):
    cnt = 0
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            s += x[i] * x[i]
            cnt += 1
    return s / cnt


def count_mean_positive_jax(x):
    pos = x > 0.0
    return jnp.sum(jnp.where(pos, x * x, 0.0)) / jnp.sum(pos)


program(FAMILY, "count-mean-positive", count_mean_positive, count_mean_positive_jax,
        lambda rng: (away(rng, 16, -2.0, 2.0, (0.0,), 0.1),), transforms=SMOOTH)


# ------------------------------------------------------------------ while loops with caps
@njit
def newton_sqrt(a):
    y = a if a > 1.0 else 1.0
    it = 0
    while abs(y * y - a) > 1e-15 * a and it < 60:
        y = 0.5 * (y + a / y)
        it += 1
    return y


program(FAMILY, "newton-sqrt", newton_sqrt, lambda a: jnp.sqrt(a),
        lambda rng: (float(rng.uniform(0.3, 20.0)),), transforms=SMOOTH)


@njit
def kepler_newton(mean_anomaly, e):
    out = np.empty_like(mean_anomaly)
    for i in range(mean_anomaly.shape[0]):
        m = mean_anomaly[i]
        big_e = m
        it = 0
        while it < 50:
            step = (big_e - e * math.sin(big_e) - m) / (1.0 - e * math.cos(big_e))
            big_e -= step
            it += 1
            if abs(step) < 1e-14:
                break
        out[i] = big_e
    return out


def kepler_newton_jax(mean_anomaly, e):
    big_e = mean_anomaly
    for _ in range(40):
        big_e = big_e - (big_e - e * jnp.sin(big_e) - mean_anomaly) / (1.0 - e * jnp.cos(big_e))
    return big_e


program(FAMILY, "kepler-newton", kepler_newton, kepler_newton_jax,
        lambda rng: (rng.uniform(0.1, 3.0, 6), float(rng.uniform(0.1, 0.6))), wrt=(0, 1),
        transforms=ARRAY)


@njit
def fixed_point_cos(a, b):
    y = 0.0
    for _ in range(500):
        y_next = a * math.cos(y) + b
        if abs(y_next - y) < 1e-16:
            y = y_next
            break
        y = y_next
    return y


def fixed_point_cos_jax(a, b):
    return jax.lax.fori_loop(0, 300, lambda _, y: a * jnp.cos(y) + b, 0.0 * a)


program(FAMILY, "fixed-point-cos", fixed_point_cos, fixed_point_cos_jax,
        lambda rng: (float(rng.uniform(0.3, 0.6)), float(rng.uniform(-0.5, 0.5))), wrt=(0, 1),
        rtol=1e-8)


# ------------------------------------------------------------------ helpers writing into arrays
@njit
def _softplus_into(x, out):
    for i in range(x.shape[0]):
        out[i] = math.log1p(math.exp(x[i]))


@njit
def helper_fill(x, w):
    out = np.empty_like(x)
    _softplus_into(x, out)
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * out[i]
    return s


def helper_fill_jax(x, w):
    return jnp.sum(w * jnp.log1p(jnp.exp(x)))


program(FAMILY, "helper-fill", helper_fill, helper_fill_jax,
        lambda rng: (rng.standard_normal(10), rng.standard_normal(10)), wrt=(0, 1))


@njit
def _window_energy(x, start, width):
    e = 0.0
    for j in range(start, start + width):
        e += x[j] * x[j]
    return math.sqrt(e + 1.0)


@njit
def helper_scalar_window(x):
    s = 0.0
    for i in range(x.shape[0] - 2):
        s += _window_energy(x, i, 3) * x[i]
    return s


def helper_scalar_window_jax(x):
    windows = x[:-2] ** 2 + x[1:-1] ** 2 + x[2:] ** 2
    return jnp.sum(jnp.sqrt(windows + 1.0) * x[:-2])


program(FAMILY, "helper-scalar-window", helper_scalar_window, helper_scalar_window_jax,
        lambda rng: (rng.standard_normal(9),), transforms=SMOOTH)


@njit
def _moments_into(x, out):
    n = x.shape[0]
    m = 0.0
    for i in range(n):
        m += x[i]
    m /= n
    v = 0.0
    for i in range(n):
        v += (x[i] - m) ** 2
    out[0] = m
    out[1] = v / (n - 1)


@njit
def helper_moments(x):
    stats = np.zeros(2)
    _moments_into(x, stats)
    return stats[0] * stats[0] + math.log(stats[1])


def helper_moments_jax(x):
    return jnp.mean(x) ** 2 + jnp.log(jnp.var(x, ddof=1))


program(FAMILY, "helper-moments", helper_moments, helper_moments_jax,
        lambda rng: (rng.standard_normal(12),), transforms=SMOOTH)


@njit
def _tanh_rows_into(a, out):
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            out[i, j] = math.tanh(a[i, j])


@njit
def helper_fill_2d(a):
    out = np.empty_like(a)
    _tanh_rows_into(a, out)
    col = np.zeros(a.shape[1])
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            col[j] += out[i, j]
    return col


program(FAMILY, "helper-fill-2d", helper_fill_2d, lambda a: jnp.sum(jnp.tanh(a), axis=0),
        lambda rng: (rng.standard_normal((4, 3)),), transforms=ARRAY)


# ------------------------------------------------------------------ swapped buffers
@njit
def swap_smoothing(x, c):
    a = x.copy()
    b = np.empty_like(x)
    n = x.shape[0]
    for _ in range(8):
        b[0] = a[0]
        b[n - 1] = a[n - 1]
        for i in range(1, n - 1):
            b[i] = a[i] + c * (a[i - 1] - 2.0 * a[i] + a[i + 1])
        a, b = b, a
    return a


def swap_smoothing_jax(x, c):
    a = jnp.asarray(x)
    for _ in range(8):
        a = a.at[1:-1].set(a[1:-1] + c * (a[:-2] - 2.0 * a[1:-1] + a[2:]))
    return a


program(FAMILY, "swap-smoothing", swap_smoothing, swap_smoothing_jax,
        lambda rng: (rng.standard_normal(10), float(rng.uniform(0.1, 0.4))), wrt=(0, 1),
        transforms=ARRAY)


@njit
def swap_nonlinear_steps(x):
    a = x.copy()
    b = np.empty_like(x)
    for _ in range(6):
        for i in range(a.shape[0]):
            b[i] = a[i] - 0.1 * math.sin(a[i]) * a[(i + 1) % a.shape[0]]
        a, b = b, a
    return np.sum(a * a)


def swap_nonlinear_steps_jax(x):
    a = jnp.asarray(x)
    for _ in range(6):
        a = a - 0.1 * jnp.sin(a) * jnp.roll(a, -1)
    return jnp.sum(a * a)


program(FAMILY, "swap-nonlinear-steps", swap_nonlinear_steps, swap_nonlinear_steps_jax,
        lambda rng: (rng.standard_normal(7),), transforms=SMOOTH)


# ------------------------------------------------------------------ branches on data
@njit
def pair_sign(x):
    s = 0.0
    n = x.shape[0]
    for i in range(n):
        for j in range(i + 1, n):
            p = x[i] * x[j]
            if p > 0.0:
                s += p
            else:
                s -= 0.5 * (x[i] - x[j]) ** 2
    return s


def pair_sign_jax(x):
    p = x[:, None] * x[None, :]
    d = -0.5 * (x[:, None] - x[None, :]) ** 2
    upper = jnp.triu(jnp.ones_like(p), 1)
    return jnp.sum(upper * jnp.where(p > 0.0, p, d))


program(FAMILY, "pair-sign", pair_sign, pair_sign_jax,
        lambda rng: (away(rng, 8, -2.0, 2.0, (0.0,), 0.2),), transforms=SMOOTH)


@njit
def clamp_loop(x, a):
    s = 0.0
    for i in range(x.shape[0]):
        v = x[i] * a
        if v > 1.0:
            v = 1.0
        elif v < -0.5:
            v = -0.5
        s += v * v + v
    return s


def clamp_loop_jax(x, a):
    v = jnp.clip(x * a, -0.5, 1.0)
    return jnp.sum(v * v + v)


def _clamp_args(rng):
    a = float(rng.uniform(0.8, 1.5))
    return away(rng, 14, -1.5, 2.0, (-0.5, 1.0), 0.08) / a, a


program(FAMILY, "clamp-loop", clamp_loop, clamp_loop_jax, _clamp_args, wrt=(0, 1))


@njit
def total_variation(x, lam):
    s = 0.0
    for i in range(1, x.shape[0]):
        s += abs(x[i] - x[i - 1])
    r = 0.0
    for i in range(x.shape[0]):
        r += (x[i] - 0.2) ** 2
    return lam * s + r


def total_variation_jax(x, lam):
    return lam * jnp.sum(jnp.abs(jnp.diff(x))) + jnp.sum((x - 0.2) ** 2)


program(FAMILY, "total-variation", total_variation, total_variation_jax,
        lambda rng: (distinct(rng, 10), float(rng.uniform(0.1, 1.0))), wrt=(0, 1))


@njit
def ternary_max(x, y):
    s = 0.0
    for i in range(x.shape[0]):
        s += x[i] ** 2 if x[i] > y[i] else y[i] * x[i]
    return s


def ternary_max_jax(x, y):
    return jnp.sum(jnp.where(x > y, x ** 2, y * x))


def _ternary_args(rng):
    y = rng.standard_normal(10)
    return y + away(rng, 10, -1.5, 1.5, (0.0,), 0.1), y


program(FAMILY, "ternary-max", ternary_max, ternary_max_jax, _ternary_args, wrt=(0, 1))


@njit
def leaky_relu_array(x):
    out = np.empty_like(x)
    for i in range(x.shape[0]):
        if x[i] > 0.0:
            out[i] = x[i]
        else:
            out[i] = 0.1 * x[i]
    return out


program(FAMILY, "leaky-relu-array", leaky_relu_array,
        lambda x: jnp.where(x > 0.0, x, 0.1 * x),
        lambda rng: (away(rng, 8, -2.0, 2.0, (0.0,), 0.1),), transforms=ARRAY)


@njit
def cummax(x):
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = max(out[i - 1], x[i])
    return out


program(FAMILY, "cummax", cummax, lambda x: jax.lax.cummax(x),
        lambda rng: (distinct(rng, 6),), transforms=ARRAY)


@njit
def running_max_prefix_sum(x, w):
    # The running maximum is used inside the loop, not only after it.
    m = x[0]
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > m:
            m = x[i]
        s += w[i] * m
    return s


def running_max_prefix_sum_jax(x, w):
    return jnp.sum(w * jax.lax.cummax(x))


program(FAMILY, "running-max-prefix-sum", running_max_prefix_sum, running_max_prefix_sum_jax,
        lambda rng: (distinct(rng, 10), rng.uniform(0.5, 2.0, 10)), wrt=(0, 1))


@njit
def running_max_carried(x):
    # The smallest form: the running maximum's value summed at every step.
    m = x[0]
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > m:
            m = x[i]
        s += m
    return s


program(FAMILY, "running-max-carried", running_max_carried, lambda x: jnp.sum(jax.lax.cummax(x)),
        lambda rng: (distinct(rng, 5),))


@njit
def running_max_carried_builtin(x):
    m = x[0]
    s = 0.0
    for i in range(x.shape[0]):
        m = max(m, x[i])
        s += m
    return s


program(FAMILY, "running-max-carried-builtin", running_max_carried_builtin,
        lambda x: jnp.sum(jax.lax.cummax(x)), lambda rng: (distinct(rng, 6),))


@njit
def running_min_unused_temp(x):
    # A work array left over from an edit (allocated, never used) next to a running minimum.
    work = np.empty(x.shape[0])  # noqa: F841
    m = np.inf
    for i in range(x.shape[0]):
        m = min(m, math.sin(x[i]))
    return math.exp(math.tanh(m))


def running_min_unused_temp_jax(x):
    return jnp.exp(jnp.tanh(jnp.min(jnp.sin(x))))


program(FAMILY, "running-min-unused-temp", running_min_unused_temp, running_min_unused_temp_jax,
        lambda rng: (distinct(rng, 5, -1.4, 1.4),), transforms=SMOOTH,
        notes="an unused np.empty next to a running min feeding exp(tanh(m)): Enzyme aborted ('Illegal "
              "replace ficticious phi') until pyjlad kept its loop-carried select rule from applying "
              "(pyjlad/carried_selects.py); found by the fuzzer (program 263)")


@njit
def running_min_builtin_prefix(x):
    m = np.inf
    s = 0.0
    for i in range(x.shape[0]):
        m = min(m, x[i])
        s += m * m
    return s


def running_min_builtin_prefix_jax(x):
    return jnp.sum(jax.lax.cummin(x) ** 2)


program(FAMILY, "running-min-builtin-prefix", running_min_builtin_prefix,
        running_min_builtin_prefix_jax, lambda rng: (distinct(rng, 10),), transforms=SMOOTH)


@njit
def row_max_2d(a):
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        m = a[i, 0]
        for j in range(1, a.shape[1]):
            if a[i, j] > m:
                m = a[i, j]
        out[i] = m
    return out


program(FAMILY, "row-max-2d", row_max_2d, lambda a: jnp.max(a, axis=1),
        lambda rng: (distinct(rng, 15).reshape(3, 5),), transforms=ARRAY)


# ------------------------------------------------------------------ sorting and indexing
@njit
def insertion_sort_weighted(x, w):
    y = x.copy()
    for i in range(1, y.shape[0]):
        key = y[i]
        j = i - 1
        while j >= 0 and y[j] > key:
            y[j + 1] = y[j]
            j -= 1
        y[j + 1] = key
    s = 0.0
    for i in range(y.shape[0]):
        s += w[i] * y[i]
    return s


def insertion_sort_weighted_jax(x, w):
    return jnp.sum(w * jnp.sort(x))


program(FAMILY, "insertion-sort-weighted", insertion_sort_weighted, insertion_sort_weighted_jax,
        lambda rng: (distinct(rng, 10), rng.standard_normal(10)), wrt=(0, 1))


@njit
def trimmed_mean_sq(x):
    y = np.sort(x)
    s = 0.0
    for i in range(2, y.shape[0] - 2):
        s += y[i] * y[i]
    return s / (y.shape[0] - 4)


def trimmed_mean_sq_jax(x):
    y = jnp.sort(x)
    return jnp.mean(y[2:-2] ** 2)


program(FAMILY, "trimmed-mean-sq", trimmed_mean_sq, trimmed_mean_sq_jax,
        lambda rng: (distinct(rng, 12),), transforms=SMOOTH)


@njit
def gather_index(x, idx, w):
    s = 0.0
    for i in range(idx.shape[0]):
        s += w[i] * x[idx[i]] ** 2
    return s


def gather_index_jax(x, idx, w):
    return jnp.sum(w * x[idx] ** 2)


program(FAMILY, "gather-index", gather_index, gather_index_jax,
        lambda rng: (rng.standard_normal(6), rng.integers(0, 6, 15), rng.standard_normal(15)),
        wrt=(0, 2))


@njit
def scatter_add_index(x, idx):
    acc = np.zeros(4)
    for i in range(x.shape[0]):
        acc[idx[i]] += math.exp(0.5 * x[i])
    return acc


def scatter_add_index_jax(x, idx):
    return jnp.zeros(4).at[idx].add(jnp.exp(0.5 * x))


program(FAMILY, "scatter-add-index", scatter_add_index, scatter_add_index_jax,
        lambda rng: (rng.standard_normal(10), rng.integers(0, 4, 10)), transforms=ARRAY)


# ------------------------------------------------------------------ float32 variants
@njit
def running_max_if_f32(x):
    m = x[0]
    s = np.float32(0.0)
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
        s += x[i] * x[i]
    return m * m + s


def running_max_if_f32_jax(x):
    return jnp.max(x) ** 2 + jnp.sum(x[1:] ** 2)


program(FAMILY, "running-max-if-f32", running_max_if_f32, running_max_if_f32_jax,
        lambda rng: (distinct(rng, 12).astype(np.float32),), rtol=1e-5, atol=1e-5)


@njit
def early_exit_break_f32(x, t):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        s += x[i] * x[i]
        if s > t:
            break
    return s * s


def _prefix_args_f32(rng):
    x, t = _prefix_args(rng)
    return x.astype(np.float32), t


program(FAMILY, "early-exit-break-f32", early_exit_break_f32, early_exit_break_jax,
        _prefix_args_f32, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ recursion (called from another function)
@njit
def _halves(x, lo, hi):
    if hi - lo <= 2:
        s = 0.0
        for i in range(lo, hi):
            s += x[i] * x[i] * math.cos(x[i])
        return s
    mid = (lo + hi) // 2
    return 1.1 * _halves(x, lo, mid) + _halves(x, mid, hi)


@njit
def recursive_halves(x):
    return _halves(x, 0, x.shape[0])


def _halves_jax(x, lo, hi):
    if hi - lo <= 2:
        return jnp.sum(x[lo:hi] ** 2 * jnp.cos(x[lo:hi]))
    mid = (lo + hi) // 2
    return 1.1 * _halves_jax(x, lo, mid) + _halves_jax(x, mid, hi)


def recursive_halves_jax(x):
    return _halves_jax(x, 0, x.shape[0])


program(FAMILY, "recursive-halves", recursive_halves, recursive_halves_jax,
        lambda rng: (rng.standard_normal(11),), transforms=SMOOTH)


@njit
def _power_by_squaring(x, n):
    if n == 0:
        return np.ones_like(x)
    h = _power_by_squaring(x, n // 2)
    if n % 2:
        return h * h * x
    return h * h


@njit
def recursive_powers(x):
    return _power_by_squaring(x, 5) - 0.5 * _power_by_squaring(x, 2)


def recursive_powers_jax(x):
    return x ** 5 - 0.5 * x ** 2


program(FAMILY, "recursive-powers", recursive_powers, recursive_powers_jax,
        lambda rng: (rng.standard_normal(7),), transforms=ARRAY)
