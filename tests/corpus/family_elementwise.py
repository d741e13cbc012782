"""Elementwise functions and broadcasting: where, clip, maximum/minimum, abs, ufuncs, array results.

Non-smooth functions are checked at points 0.1 away from their kinks. Array-valued programs
are checked by ``jacobian``, ``jvp`` and ``vjp``; each is also checked with a strided,
reversed, transposed or Fortran-ordered input and in float32 where that takes another path.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from numba import njit

from corpus.arrays import ARRAY, F32, args, normal, positive
from corpus.program import program

FAMILY = "elementwise"


@njit
def where_scalar(x):
    return np.where(x > 0.0, x * x, -0.5 * x)


@njit
def where_two_arrays(x, y):
    return np.where(x > y, np.sin(x), y * x)


@njit
def clip_scalar(x):
    return np.clip(x, -0.5, 0.5)


@njit
def clip_array_bounds(x, lo):
    return np.clip(x, lo, 1.0)


@njit
def maximum_arrays(x, y):
    return np.maximum(x, y)


@njit
def minimum_scalar(x):
    return np.minimum(x, 0.3) * x


@njit
def fmax_fmin(x, y):
    return np.fmax(x, y) - 2.0 * np.fmin(x, 0.2)


@njit
def abs_(x):
    return np.abs(x) * x


@njit
def absolute_fabs(x):
    return np.absolute(x) + np.sqrt(np.fabs(x))


@njit
def sign_mul(x):
    return np.sign(x) * x * x


@njit
def relu_sq(x):
    return np.maximum(x, 0.0) ** 2


@njit
def trig(x):
    return np.sin(x) * np.cos(2.0 * x) + np.tan(0.3 * x)


@njit
def hyperbolic(x):
    return np.tanh(x) + np.sinh(0.5 * x) - np.cosh(0.3 * x) + np.arcsinh(x)


@njit
def inverse_trig(x):
    return np.arcsin(0.5 * np.tanh(x)) + np.arctan(x) + np.arccos(0.3 * np.tanh(x))


@njit
def exp_log(x):
    return np.exp(0.5 * x) + np.log(1.0 + x * x) + np.log2(2.0 + x * x) + np.log10(3.0 + x * x)


@njit
def expm1_log1p(x):
    return np.expm1(x) * np.log1p(x * x)


@njit
def powers(x):
    return np.sqrt(x) + np.cbrt(x) + np.power(x, 2.5) + x ** -1.5 + np.square(x) + np.reciprocal(x)


@njit
def float_power(x, y):
    return np.float_power(x, y)


@njit
def arctan2_(y, x):
    return np.arctan2(y, x)


@njit
def hypot_(x, y):
    return np.hypot(x, y)


@njit
def logaddexp_(x, y):
    return np.logaddexp(x, y) + np.logaddexp2(x, 0.5 * y)


@njit
def sinc_(x):
    return np.sinc(x)


@njit
def copysign_(x):
    return np.copysign(x * x, -1.0)


@njit
def deg2rad_(x):
    return np.sin(np.deg2rad(x)) + np.radians(x) * np.degrees(x)


@njit
def fmod_(x):
    return np.fmod(x, 0.7) * x


@njit
def broadcast_row(x, b):
    return np.tanh(x + b)


@njit
def broadcast_outer(x, y):
    return np.exp(-(x.reshape(-1, 1) - y.reshape(1, -1)) ** 2)


@njit
def scalar_times_array(a, x):
    return a * x + a * a


@njit
def in_place_ops(x):
    y = x.copy()
    y *= 2.0
    y += x * x
    y -= 1.0
    y /= 1.0 + x * x
    return y


@njit
def sigmoid_loss(x, t):
    p = 1.0 / (1.0 + np.exp(-x))
    return -np.sum(t * np.log(p) + (1.0 - t) * np.log(1.0 - p))


@njit
def huber(x):
    a = np.abs(x)
    return np.sum(np.where(a < 1.0, 0.5 * x * x, a - 0.5))


@njit
def softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0.0)


def _powers(x):
    return jnp.sqrt(x) + jnp.cbrt(x) + jnp.power(x, 2.5) + x ** -1.5 + jnp.square(x) + jnp.reciprocal(x)


def _in_place_ops(x):
    return (2.0 * x + x * x - 1.0) / (1.0 + x * x)


def _huber(x):
    a = jnp.abs(x)
    return jnp.sum(jnp.where(a < 1.0, 0.5 * x * x, a - 0.5))


def _sigmoid_loss(x, t):
    p = 1.0 / (1.0 + jnp.exp(-x))
    return -jnp.sum(t * jnp.log(p) + (1.0 - t) * jnp.log(1.0 - p))


KINK0 = (0.0,)

#: np.where with an array result (its sum differentiates: reductions and huber).
_WHERE = {"notes": "np.where returning an array: " + "Enzyme failed on the vectorized loops Numba compiles for it until pyjlad retried with the vectors split into scalars (invertPointerM in reverse mode, a module that "
                   "fails verification in forward mode)"}


def _apart(rng: np.random.Generator, shape: tuple[int, ...], dtype=np.float64) -> tuple[np.ndarray, np.ndarray]:
    """Two arrays whose entries differ by 0.2 to 1 either way (comparisons keep a margin)."""
    x = rng.standard_normal(shape)
    y = x + rng.choice([-1.0, 1.0], shape) * rng.uniform(0.2, 1.0, shape)
    return x.astype(dtype), y.astype(dtype)

# (name, numba, oracle, argument builders for a given shape/dtype/layout, wrt)
_unary = [
    ("where_scalar", where_scalar, lambda x: jnp.where(x > 0.0, x * x, -0.5 * x), KINK0),
    ("clip_scalar", clip_scalar, lambda x: jnp.clip(x, -0.5, 0.5), (-0.5, 0.5)),
    ("minimum_scalar", minimum_scalar, lambda x: jnp.minimum(x, 0.3) * x, (0.3,)),
    ("abs", abs_, lambda x: jnp.abs(x) * x, KINK0),
    ("absolute_fabs", absolute_fabs, lambda x: jnp.absolute(x) + jnp.sqrt(jnp.fabs(x)), KINK0),
    ("sign_mul", sign_mul, lambda x: jnp.sign(x) * x * x, KINK0),
    ("relu_sq", relu_sq, lambda x: jnp.maximum(x, 0.0) ** 2, KINK0),
    ("trig", trig, lambda x: jnp.sin(x) * jnp.cos(2.0 * x) + jnp.tan(0.3 * x), None),
    ("hyperbolic", hyperbolic,
     lambda x: jnp.tanh(x) + jnp.sinh(0.5 * x) - jnp.cosh(0.3 * x) + jnp.arcsinh(x), None),
    ("inverse_trig", inverse_trig,
     lambda x: jnp.arcsin(0.5 * jnp.tanh(x)) + jnp.arctan(x) + jnp.arccos(0.3 * jnp.tanh(x)), None),
    ("exp_log", exp_log,
     lambda x: jnp.exp(0.5 * x) + jnp.log(1.0 + x * x) + jnp.log2(2.0 + x * x) + jnp.log10(3.0 + x * x), None),
    ("expm1_log1p", expm1_log1p, lambda x: jnp.expm1(x) * jnp.log1p(x * x), None),
    ("sinc", sinc_, jnp.sinc, None),
    ("copysign", copysign_, lambda x: jnp.copysign(x * x, -1.0), None),
    ("deg2rad", deg2rad_, lambda x: jnp.sin(jnp.deg2rad(x)) + jnp.radians(x) * jnp.degrees(x), None),
    ("fmod", fmod_, lambda x: jnp.fmod(x, 0.7) * x, (-1.4, -0.7, 0.0, 0.7, 1.4)),
    ("in_place_ops", in_place_ops, _in_place_ops, None),
    ("softplus", softplus, lambda x: jnp.log1p(jnp.exp(-jnp.abs(x))) + jnp.maximum(x, 0.0), KINK0),
]

for _name, _numba, _oracle, _kinks in _unary:
    program(FAMILY, f"{_name}/1d", _numba, _oracle, args(normal(5, thresholds=_kinks)), transforms=ARRAY,
            **(_WHERE if _name == "where_scalar" else {}))

# The same functions on 2-D and 3-D arrays, other layouts and float32 (every third one each).
_LAYOUT_CYCLE = ("strided", "reversed", "transposed", "F")
for _k, (_name, _numba, _oracle, _kinks) in enumerate(_unary):
    _kind = _LAYOUT_CYCLE[_k % len(_LAYOUT_CYCLE)]
    _expect = _WHERE if _name == "where_scalar" else {}
    program(FAMILY, f"{_name}/2d-{_kind}", _numba, _oracle, args(normal(3, 2, thresholds=_kinks, kind=_kind)),
            transforms=ARRAY, **_expect)
    if _k % 3 == 0:
        program(FAMILY, f"{_name}/3d", _numba, _oracle, args(normal(2, 2, 2, thresholds=_kinks)),
                transforms=("vjp", "jvp"), **_expect)
    if _k % 3 == 1:
        program(FAMILY, f"{_name}/1d-f32", _numba, _oracle,
                args(normal(5, thresholds=_kinks, dtype=np.float32)), transforms=ARRAY, **F32)

program(FAMILY, "powers/1d", powers, _powers, args(positive(5)), transforms=ARRAY)
program(FAMILY, "powers/2d-f32", powers, _powers, args(positive(2, 3, dtype=np.float32)), transforms=ARRAY, **F32)
program(FAMILY, "float_power/1d", float_power, jnp.float_power, args(positive(4), normal(4)), wrt=(0, 1),
        transforms=ARRAY)
program(FAMILY, "arctan2/1d", arctan2_, jnp.arctan2, args(normal(4), positive(4)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "hypot/2d", hypot_, jnp.hypot, args(normal(2, 3), normal(2, 3)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "logaddexp/1d", logaddexp_, lambda x, y: jnp.logaddexp(x, y) + jnp.logaddexp2(x, 0.5 * y),
        args(normal(4), normal(4)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "where_two_arrays/1d", where_two_arrays, lambda x, y: jnp.where(x > y, jnp.sin(x), y * x),
        lambda r: _apart(r, (6,)), wrt=(0, 1), transforms=("jvp",))
program(FAMILY, "where_two_arrays/1d-reverse", where_two_arrays,
        lambda x, y: jnp.where(x > y, jnp.sin(x), y * x), lambda r: _apart(r, (6,)), wrt=(0, 1),
        transforms=("jacobian", "vjp"), **_WHERE)
program(FAMILY, "clip_array_bounds/1d", clip_array_bounds, lambda x, lo: jnp.clip(x, lo, 1.0),
        args(normal(6, thresholds=(-0.5, 1.0)), np.full(6, -0.5)), wrt=(0, 1), transforms=ARRAY,
        notes="np.clip with an array bound: Numba broadcasts the operands through a list of read-only "
        "arrays that grows, refused until 2026-12-06 (pyjlad.list_growth types its growth)")
program(FAMILY, "maximum_arrays/1d", maximum_arrays, jnp.maximum, lambda r: _apart(r, (6,)),
        wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "maximum_arrays/2d-f32", maximum_arrays, jnp.maximum, lambda r: _apart(r, (2, 3), np.float32),
        wrt=(0, 1), transforms=ARRAY, **F32)
program(FAMILY, "maximum_arrays/2d-transposed", maximum_arrays, jnp.maximum,
        lambda r: tuple(y.T for y in _apart(r, (3, 2))), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "fmax_fmin/1d", fmax_fmin, lambda x, y: jnp.fmax(x, y) - 2.0 * jnp.fmin(x, 0.2),
        args(normal(5, thresholds=(0.2, 0.6)), np.full(5, 0.6)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "broadcast_row/2d", broadcast_row, lambda x, b: jnp.tanh(x + b), args(normal(3, 4), normal(4)),
        wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "broadcast_outer/1d", broadcast_outer,
        lambda x, y: jnp.exp(-(x.reshape(-1, 1) - y.reshape(1, -1)) ** 2), args(normal(3), normal(4)),
        wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "scalar_times_array/1d", scalar_times_array, lambda a, x: a * x + a * a,
        args(0.7, normal(4)), wrt=(0, 1), transforms=ARRAY)
program(FAMILY, "sigmoid_loss/1d", sigmoid_loss, _sigmoid_loss,
        args(normal(6), positive(6, low=0.0, high=1.0)), wrt=(0,), transforms=("gradient", "hvp"))
program(FAMILY, "huber/1d", huber, _huber, args(normal(8, scale=2.0, thresholds=(-1.0, 0.0, 1.0))))
program(FAMILY, "huber/2d-f32", huber, _huber,
        args(normal(3, 3, scale=2.0, thresholds=(-1.0, 0.0, 1.0), dtype=np.float32)), **F32)
