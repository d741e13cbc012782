"""Functions the test suite differentiates, with hand-derived gradients.

Every function here is checked three ways: against its analytic gradient
(written out by hand below, never produced by pyjlad), against central finite
differences, and (tests/test_portable.py) for IR portability across LLVM 15,
16, 19 and 22.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numba import cfunc, njit, types

#: Portable module text of everything the suite exports (filled by conftest.py).
EXPORTED: dict[str, str] = {}


@dataclass
class Case:
    name: str
    func: Callable[..., Any]
    args: tuple[Any, ...]
    wrt: Any
    analytic: Callable[..., Any]
    rtol: float = 1e-10
    fd_rtol: float = 1e-6
    tags: set[str] = field(default_factory=set)


rng = np.random.default_rng(20261122)

# ----------------------------------------------------------------- seed 000
@cfunc(types.double(types.double, types.double))
def seed000_func(a, b):
    return a * b


# ---------------------------------------------------------- scalar functions
@njit
def scalar_math(x, y):
    return (math.sin(x) * math.cos(y) + math.tan(x / 3.0) + math.exp(-x * y)
            + math.log(x + 2.0) + math.log1p(y * y) + math.sqrt(x * x + 1.0)
            + math.tanh(x - y) + x ** 3 + y ** 2.5 + math.pow(x, y))


def scalar_math_grad(x, y):
    dx = (math.cos(x) * math.cos(y) + (1 + math.tan(x / 3) ** 2) / 3 - y * math.exp(-x * y)
          + 1 / (x + 2) + x / math.sqrt(x * x + 1) + (1 - math.tanh(x - y) ** 2) + 3 * x ** 2
          + y * x ** (y - 1))
    dy = (-math.sin(x) * math.sin(y) - x * math.exp(-x * y) + 2 * y / (1 + y * y)
          - (1 - math.tanh(x - y) ** 2) + 2.5 * y ** 1.5 + math.pow(x, y) * math.log(x))
    return dx, dy


@njit
def scalar_branches(x, y):
    a = abs(x - 0.3)
    b = max(x, y) + min(x * y, 0.25)
    if x > y:
        c = x * x
    else:
        c = 3.0 * y
    return a + b + c + math.atan2(x, y) + math.expm1(x) + np.sin(y) * np.exp(x)


def scalar_branches_grad(x, y):
    da = 1.0 if x > 0.3 else -1.0
    dmax_x, dmax_y = (1.0, 0.0) if x > y else (0.0, 1.0)
    if x * y < 0.25:
        dmin_x, dmin_y = y, x
    else:
        dmin_x, dmin_y = 0.0, 0.0
    dc_x, dc_y = (2 * x, 0.0) if x > y else (0.0, 3.0)
    r2 = x * x + y * y
    return (da + dmax_x + dmin_x + dc_x + y / r2 + math.exp(x) + np.sin(y) * np.exp(x),
            dmax_y + dmin_y + dc_y - x / r2 + np.cos(y) * np.exp(x))


@njit
def scalar_with_int(x, n, flag):
    s = 0.0
    for k in range(n):
        s += x ** k / (k + 1)
    return s * 2.0 if flag else s


def scalar_with_int_grad(x, n, flag):
    g = sum(k * x ** (k - 1) / (k + 1) for k in range(1, n))
    return g * 2.0 if flag else g


def plain_python_product(a, b):  # not decorated: pyjlad njit-compiles it
    return a * b * b


# ------------------------------------------------------------------- arrays
@njit
def sin_x_dot_x(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.sin(x[i]) * x[i]
    return s


@njit
def weighted_2d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            s += a[i, j] ** 2 * (i + 1) + math.cos(a[i, j]) * j
    return s


def weighted_2d_grad(a):
    i = np.arange(a.shape[0])[:, None]
    j = np.arange(a.shape[1])[None, :]
    return 2 * a * (i + 1) - np.sin(a) * j


@njit
def cube_3d(a):
    s = 0.0
    for i in range(a.shape[0]):
        for j in range(a.shape[1]):
            for k in range(a.shape[2]):
                s += a[i, j, k] ** 3 * (1 + k)
    return s


def cube_3d_grad(a):
    k = np.arange(a.shape[2])[None, None, :]
    return 3 * a ** 2 * (1 + k)


@njit
def float32_sumsq(a):
    s = np.float32(0.0)
    for i in range(a.shape[0]):
        s += a[i] * a[i]
    return s


@njit
def relu_branch(x, threshold):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > threshold:
            s += x[i] * x[i]
        else:
            s += 0.5 * x[i]
    return s


def relu_branch_grad(x, threshold):
    return np.where(x > threshold, 2 * x, 0.5)


@njit
def _inner_energy(a, b):
    return math.exp(-a) * b + a * a


@njit
def _middle(x, i, c):
    return _inner_energy(x[i], c) * 2.0


@njit
def call_chain(x, c):
    s = 0.0
    for i in range(x.shape[0]):
        s += _middle(x, i, c)
    return s


def call_chain_grad(x, c):
    gx = 2.0 * (-np.exp(-x) * c + 2 * x)
    gc = float(np.sum(2.0 * np.exp(-x)))
    return gx, gc


@njit
def two_arrays(x, y, w):
    s = 0.0
    for i in range(x.shape[0]):
        s += w * x[i] * y[i] + math.log(1.0 + y[i] * y[i])
    return s


def two_arrays_grad(x, y, w):
    return w * y, w * x + 2 * y / (1 + y * y), float(np.sum(x * y))


COEFFS = rng.normal(size=5)  # a global array: a constant to the gradient


@njit
def uses_global(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += COEFFS[i % 5] * x[i] ** 2
    return s


def uses_global_grad(x):
    return 2 * COEFFS[np.arange(x.size) % 5] * x


def make_closure():
    weights = np.linspace(1.0, 2.0, 6)  # captured from the closure: a constant

    @njit
    def closure_loss(x):
        s = 0.0
        for i in range(x.shape[0]):
            s += weights[i] * math.sin(x[i])
        return s

    return closure_loss, (lambda x: weights * np.cos(x))


closure_loss, closure_loss_grad = make_closure()


@njit
def numpy_reductions(x):
    return np.sum(np.sin(x) * x) + np.sum(x * x)


def numpy_reductions_grad(x):
    return np.cos(x) * x + np.sin(x) + 2 * x


# ------------------------------------------------------------- the registry
_x8 = rng.uniform(0.2, 1.5, 8)
_a = rng.normal(size=(4, 6))
_b3 = rng.normal(size=(2, 3, 4))

CASES: list[Case] = [
    Case("seed000_cfunc", seed000_func, (2.0, 3.0), (0, 1), lambda a, b: (b, a), rtol=0.0),
    Case("scalar_math", scalar_math, (0.7, 1.3), (0, 1), scalar_math_grad),
    Case("scalar_branches_xgt", scalar_branches, (0.9, 0.4), (0, 1), scalar_branches_grad),
    Case("scalar_branches_xlt", scalar_branches, (0.2, 0.8), (0, 1), scalar_branches_grad),
    Case("scalar_with_int", scalar_with_int, (1.3, 6, True), 0,
         lambda x, n, f: scalar_with_int_grad(x, n, f)),
    Case("plain_python", plain_python_product, (2.0, 5.0), (0, 1), lambda a, b: (b * b, 2 * a * b)),
    Case("float32_scalar", njit(lambda x: x * x * x), (np.float32(1.5),), 0,
         lambda x: 3 * float(x) ** 2, rtol=1e-6, fd_rtol=1e-2),
    Case("sin_x_dot_x", sin_x_dot_x, (np.linspace(0.0, 1.0, 1000),), 0,
         lambda x: np.cos(x) * x + np.sin(x)),
    Case("weighted_2d_C", weighted_2d, (_a,), 0, weighted_2d_grad),
    Case("weighted_2d_F", weighted_2d, (np.asfortranarray(_a),), 0, weighted_2d_grad),
    Case("weighted_2d_strided", weighted_2d, (_a[:, ::2],), 0, weighted_2d_grad),
    Case("weighted_2d_transposed", weighted_2d, (_a.T,), 0, weighted_2d_grad),
    Case("weighted_2d_reversed", weighted_2d, (_a[::-1, 1:],), 0, weighted_2d_grad),
    Case("cube_3d", cube_3d, (_b3,), 0, cube_3d_grad),
    Case("cube_3d_F", cube_3d, (np.asfortranarray(_b3),), 0, cube_3d_grad),
    Case("cube_3d_view", cube_3d, (_b3[:, ::2, ::-1],), 0, cube_3d_grad),
    Case("float32_array", float32_sumsq, (rng.normal(size=7).astype(np.float32),), 0,
         lambda a: 2 * a, rtol=1e-6, fd_rtol=1e-2),
    Case("relu_branch", relu_branch, (rng.normal(size=9), 0.1), 0, relu_branch_grad),
    Case("call_chain", call_chain, (_x8, 0.7), (0, 1), call_chain_grad),
    Case("two_arrays", two_arrays, (_x8, rng.normal(size=8), 1.7), (0, 1, 2), two_arrays_grad),
    Case("global_array_constant", uses_global, (_x8,), 0, uses_global_grad),
    Case("closure_array_constant", closure_loss, (rng.normal(size=6),), 0, closure_loss_grad),
    Case("numpy_reductions", numpy_reductions, (_x8,), 0, numpy_reductions_grad),
]


def central_fd(func: Callable[..., Any], args: tuple[Any, ...], index: int) -> Any:
    """Central finite differences of ``func`` with respect to argument ``index``."""
    args = list(args)
    x = args[index]
    h = 1e-3 if np.asarray(x).dtype == np.float32 else 1e-6
    if isinstance(x, np.ndarray):
        work = x.astype(np.float64)
        grad = np.zeros(x.shape)
        for idx in np.ndindex(x.shape):
            plus, minus = work.copy(), work.copy()
            plus[idx] += h
            minus[idx] -= h
            args[index] = plus.astype(x.dtype)
            f_plus = float(func(*args))
            args[index] = minus.astype(x.dtype)
            f_minus = float(func(*args))
            grad[idx] = (f_plus - f_minus) / (2 * h)
        return grad
    args[index] = type(x)(float(x) + h)
    f_plus = float(func(*args))
    args[index] = type(x)(float(x) - h)
    f_minus = float(func(*args))
    return (f_plus - f_minus) / (2 * h)
