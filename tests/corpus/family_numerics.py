"""Numerical methods: Horner and Clenshaw recurrences, quadrature (trapezoid, Simpson, Gauss),
root finding with capped while loops, stencils, iterative and direct solvers, power iteration,
interpolation, series summation, cumulative sums and products.

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

FAMILY = "numerics"
SMOOTH = ("gradient", "hvp")
ARRAY = ("jacobian", "jvp", "vjp")


# ------------------------------------------------------------------ polynomial recurrences
@njit
def horner(coeffs, x):
    # coeffs[0] is the leading coefficient.
    p = 0.0
    for i in range(coeffs.shape[0]):
        p = p * x + coeffs[i]
    return p


program(FAMILY, "horner", horner, lambda c, x: jnp.polyval(c, x),
        lambda rng: (rng.standard_normal(6), float(rng.uniform(-1.5, 1.5))), wrt=(0, 1))
program(FAMILY, "horner-hvp", horner, lambda c, x: jnp.polyval(c, x),
        lambda rng: (rng.standard_normal(6), float(rng.uniform(-1.5, 1.5))), wrt=(1,), transforms=SMOOTH)


@njit
def horner_points(coeffs, xs):
    out = np.empty_like(xs)
    for k in range(xs.shape[0]):
        p = 0.0
        for i in range(coeffs.shape[0] - 1, -1, -1):
            p = p * xs[k] + coeffs[i]
        out[k] = p
    return out


program(FAMILY, "horner-points", horner_points, lambda c, xs: jnp.polyval(c[::-1], xs),
        lambda rng: (rng.standard_normal(5), rng.uniform(-1.0, 1.0, 4)), wrt=(0, 1), transforms=ARRAY)


@njit
def horner_f32(coeffs, x):
    p = np.float32(0.0)
    for i in range(coeffs.shape[0]):
        p = p * x + coeffs[i]
    return p


program(FAMILY, "horner-f32", horner_f32, lambda c, x: jnp.polyval(c, x),
        lambda rng: (rng.standard_normal(6).astype(np.float32), np.float32(0.7)), wrt=(0, 1),
        rtol=1e-4, atol=1e-5)


@njit
def clenshaw_chebyshev(c, x):
    b1 = 0.0
    b2 = 0.0
    for k in range(c.shape[0] - 1, 0, -1):
        b1, b2 = 2.0 * x * b1 - b2 + c[k], b1
    return x * b1 - b2 + c[0]


def clenshaw_chebyshev_jax(c, x):
    t = jnp.cos(jnp.arange(c.shape[0]) * jnp.arccos(x))
    return jnp.sum(c * t)


program(FAMILY, "clenshaw-chebyshev", clenshaw_chebyshev, clenshaw_chebyshev_jax,
        lambda rng: (rng.standard_normal(7), float(rng.uniform(-0.9, 0.9))), wrt=(0, 1), rtol=1e-8)


@njit
def continued_fraction_tanh(x, terms):
    # tanh(x) = x / (1 + x^2 / (3 + x^2 / (5 + ...))), evaluated from the tail.
    x2 = x * x
    f = 2.0 * terms + 1.0
    for k in range(terms - 1, 0, -1):
        f = (2.0 * k + 1.0) + x2 / f
    return x / (1.0 + x2 / f)


program(FAMILY, "continued-fraction-tanh", continued_fraction_tanh, lambda x, n: jnp.tanh(x),
        lambda rng: (float(rng.uniform(-1.5, 1.5)), 20), transforms=SMOOTH)


# ------------------------------------------------------------------ quadrature
def _integrand_jax(t, a, b):
    return jnp.exp(-a * t * t) * jnp.cos(b * t)


@njit
def trapezoid_integral(a, b, n):
    h = 3.0 / (n - 1)
    s = 0.0
    for i in range(n):
        t = i * h
        w = 0.5 if i == 0 or i == n - 1 else 1.0
        s += w * math.exp(-a * t * t) * math.cos(b * t)
    return s * h


def trapezoid_integral_jax(a, b, n):
    t = jnp.linspace(0.0, 3.0, n)
    return jnp.trapezoid(_integrand_jax(t, a, b), t)


program(FAMILY, "trapezoid-integral", trapezoid_integral, trapezoid_integral_jax,
        lambda rng: (float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 3.0)), 101), wrt=(0, 1))
program(FAMILY, "trapezoid-integral-hvp", trapezoid_integral, trapezoid_integral_jax,
        lambda rng: (float(rng.uniform(0.5, 2.0)), 1.5, 41), transforms=SMOOTH)


@njit
def simpson_integral(a, b, n):
    # Composite Simpson on n (even) intervals.
    h = 3.0 / n
    s = 0.0
    for i in range(n + 1):
        t = i * h
        w = 1.0 if i == 0 or i == n else (4.0 if i % 2 == 1 else 2.0)
        s += w * math.exp(-a * t * t) * math.cos(b * t)
    return s * h / 3.0


def simpson_integral_jax(a, b, n):
    t = jnp.linspace(0.0, 3.0, n + 1)
    w = jnp.where(jnp.arange(n + 1) % 2 == 1, 4.0, 2.0).at[0].set(1.0).at[n].set(1.0)
    return jnp.sum(w * _integrand_jax(t, a, b)) * (3.0 / n) / 3.0


program(FAMILY, "simpson-integral", simpson_integral, simpson_integral_jax,
        lambda rng: (float(rng.uniform(0.5, 2.0)), float(rng.uniform(0.5, 3.0)), 40), wrt=(0, 1))


@njit
def np_trapezoid_samples(y, x):
    return np.trapezoid(np.sin(y) * y, x)


program(FAMILY, "np-trapezoid", np_trapezoid_samples, lambda y, x: jnp.trapezoid(jnp.sin(y) * y, x),
        lambda rng: (rng.standard_normal(9), np.sort(rng.uniform(0.0, 2.0, 9))), wrt=(0, 1))


@njit
def trapezoid_arrays(y, x):
    s = 0.0
    for i in range(1, x.shape[0]):
        s += 0.5 * (x[i] - x[i - 1]) * (y[i] + y[i - 1])
    return s


program(FAMILY, "trapezoid-arrays", trapezoid_arrays, lambda y, x: jnp.trapezoid(y, x),
        lambda rng: (rng.standard_normal(9), np.sort(rng.uniform(0.0, 2.0, 9))), wrt=(0, 1))


@njit
def trapezoid_f32(y, h):
    s = np.float32(0.0)
    for i in range(1, y.shape[0]):
        s += np.float32(0.5) * h * (y[i] * y[i] + y[i - 1] * y[i - 1])
    return s


program(FAMILY, "trapezoid-f32", trapezoid_f32, lambda y, h: jnp.trapezoid(y * y, dx=h),
        lambda rng: (rng.standard_normal(12).astype(np.float32), np.float32(0.1)), wrt=(0, 1),
        rtol=1e-4, atol=1e-5)


@njit
def gauss_legendre(params, nodes, weights):
    # Integral over [0, L] of exp(-k x) sin(w x); params = (L, k, w).
    half = 0.5 * params[0]
    s = 0.0
    for i in range(nodes.shape[0]):
        t = half * (nodes[i] + 1.0)
        s += weights[i] * math.exp(-params[1] * t) * math.sin(params[2] * t)
    return half * s


def gauss_legendre_jax(params, nodes, weights):
    half = 0.5 * params[0]
    t = half * (nodes + 1.0)
    return half * jnp.sum(weights * jnp.exp(-params[1] * t) * jnp.sin(params[2] * t))


def _gauss_args(rng):
    nodes, weights = np.polynomial.legendre.leggauss(8)
    return np.array([2.0, 0.5, 1.5]) + 0.1 * rng.standard_normal(3), nodes, weights


program(FAMILY, "gauss-legendre", gauss_legendre, gauss_legendre_jax, _gauss_args, transforms=SMOOTH)


@njit
def cumulative_trapezoid(y, h):
    out = np.zeros_like(y)
    for i in range(1, y.shape[0]):
        out[i] = out[i - 1] + 0.5 * h * (y[i] + y[i - 1])
    return out


def cumulative_trapezoid_jax(y, h):
    return jnp.concatenate([jnp.zeros(1), jnp.cumsum(0.5 * h * (y[1:] + y[:-1]))])


program(FAMILY, "cumulative-trapezoid", cumulative_trapezoid, cumulative_trapezoid_jax,
        lambda rng: (rng.standard_normal(8), 0.2), wrt=(0, 1), transforms=ARRAY)


# ------------------------------------------------------------------ root finding
@njit
def newton_cubic_root(coeffs):
    # The real root near 1.5 of x^3 + c2 x^2 + c1 x + c0, Newton with a cap and a tolerance.
    x = 1.5
    for _ in range(50):
        f = ((x + coeffs[2]) * x + coeffs[1]) * x + coeffs[0]
        df = (3.0 * x + 2.0 * coeffs[2]) * x + coeffs[1]
        step = f / df
        x -= step
        if abs(step) < 1e-15:
            break
    return x


def newton_cubic_root_jax(coeffs):
    x = 1.5 + 0.0 * coeffs[0]
    for _ in range(40):
        f = ((x + coeffs[2]) * x + coeffs[1]) * x + coeffs[0]
        df = (3.0 * x + 2.0 * coeffs[2]) * x + coeffs[1]
        x = x - f / df
    return x


def _cubic_args(rng):
    # (x - r)(x^2 + p x + q) with r near 1.5 and a complex pair: one real root.
    r = 1.5 + 0.2 * rng.standard_normal()
    p, q = 0.5, 2.0 + rng.uniform(0.0, 1.0)
    return np.array([-r * q, q - r * p, p - r]),


program(FAMILY, "newton-cubic-root", newton_cubic_root, newton_cubic_root_jax, _cubic_args,
        transforms=SMOOTH, rtol=1e-8)


@njit
def secant_root(a, b):
    # Root of x^3 + a x - b by the secant method, stopped on a tolerance or a cap.
    x0 = 0.0
    x1 = 1.0
    f0 = x0 ** 3 + a * x0 - b
    f1 = x1 ** 3 + a * x1 - b
    it = 0
    while abs(f1) > 1e-14 and it < 100:
        x2 = x1 - f1 * (x1 - x0) / (f1 - f0)
        x0, f0 = x1, f1
        x1 = x2
        f1 = x1 ** 3 + a * x1 - b
        it += 1
    return x1


def secant_root_jax(a, b):
    x = 1.0 + 0.0 * a
    for _ in range(40):
        x = x - (x ** 3 + a * x - b) / (3.0 * x * x + a)
    return x


program(FAMILY, "secant-root", secant_root, secant_root_jax,
        lambda rng: (float(rng.uniform(1.0, 3.0)), float(rng.uniform(0.5, 4.0))), wrt=(0, 1), rtol=1e-7)


@njit
def exp_taylor_while(x):
    term = 1.0
    s = 1.0
    k = 0
    while abs(term) > 1e-17 * abs(s) and k < 100:
        k += 1
        term *= x / k
        s += term
    return s


program(FAMILY, "exp-taylor-while", exp_taylor_while, lambda x: jnp.exp(x),
        lambda rng: (float(rng.uniform(-2.0, 3.0)),), transforms=SMOOTH)


# ------------------------------------------------------------------ stencils
@njit
def laplacian_energy(u):
    ny, nx = u.shape
    e = 0.0
    for i in range(1, ny - 1):
        for j in range(1, nx - 1):
            lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
            e += lap * lap
    return e


def _laplacian_jax(u):
    return u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * u[1:-1, 1:-1]


program(FAMILY, "laplacian-energy", laplacian_energy, lambda u: jnp.sum(_laplacian_jax(u) ** 2),
        lambda rng: (rng.standard_normal((6, 5)),), transforms=SMOOTH)


@njit
def laplacian_apply(u, h):
    out = np.zeros((u.shape[0] - 2, u.shape[1] - 2))
    for i in range(1, u.shape[0] - 1):
        for j in range(1, u.shape[1] - 1):
            lap = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1] - 4.0 * u[i, j]
            out[i - 1, j - 1] = lap / (h * h)
    return out


program(FAMILY, "laplacian-apply", laplacian_apply, lambda u, h: _laplacian_jax(u) / (h * h),
        lambda rng: (rng.standard_normal((5, 5)), 0.5), wrt=(0, 1), transforms=ARRAY)


@njit
def nine_point_dirichlet(u):
    ny, nx = u.shape
    e = 0.0
    for i in range(1, ny - 1):
        for j in range(1, nx - 1):
            edge = u[i - 1, j] + u[i + 1, j] + u[i, j - 1] + u[i, j + 1]
            corner = u[i - 1, j - 1] + u[i - 1, j + 1] + u[i + 1, j - 1] + u[i + 1, j + 1]
            lap = (4.0 * edge + corner - 20.0 * u[i, j]) / 6.0
            e += u[i, j] * lap + 0.1 * math.sin(u[i, j])
    return e


def nine_point_dirichlet_jax(u):
    c = u[1:-1, 1:-1]
    edge = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
    corner = u[:-2, :-2] + u[:-2, 2:] + u[2:, :-2] + u[2:, 2:]
    return jnp.sum(c * (4.0 * edge + corner - 20.0 * c) / 6.0 + 0.1 * jnp.sin(c))


program(FAMILY, "nine-point-dirichlet", nine_point_dirichlet, nine_point_dirichlet_jax,
        lambda rng: (rng.standard_normal((5, 6)),), transforms=SMOOTH)


@njit
def central_differences(y, h):
    out = np.empty_like(y)
    n = y.shape[0]
    out[0] = (y[1] - y[0]) / h
    out[n - 1] = (y[n - 1] - y[n - 2]) / h
    for i in range(1, n - 1):
        out[i] = (y[i + 1] - y[i - 1]) / (2.0 * h)
    return out


program(FAMILY, "central-differences", central_differences, lambda y, h: jnp.gradient(y, h),
        lambda rng: (rng.standard_normal(7), 0.3), wrt=(0, 1), transforms=ARRAY)


# ------------------------------------------------------------------ iterative and direct solvers
@njit
def jacobi_poisson(f, iters):
    n = f.shape[0]
    u = np.zeros(n + 2)
    v = np.zeros(n + 2)
    for _ in range(iters):
        for i in range(1, n + 1):
            v[i] = 0.5 * (u[i - 1] + u[i + 1] + f[i - 1])
        u, v = v, u
    return u[1:n + 1].copy()


def jacobi_poisson_jax(f, iters):
    u = jnp.zeros(f.shape[0] + 2)
    for _ in range(iters):
        u = u.at[1:-1].set(0.5 * (u[:-2] + u[2:] + f))
    return u[1:-1]


program(FAMILY, "jacobi-poisson", jacobi_poisson, jacobi_poisson_jax,
        lambda rng: (rng.standard_normal(6), 25), transforms=ARRAY)


@njit
def gauss_seidel_energy(a, b):
    x = np.zeros_like(b)
    n = b.shape[0]
    for _ in range(30):
        for i in range(n):
            s = b[i]
            for j in range(n):
                if j != i:
                    s -= a[i, j] * x[j]
            x[i] = s / a[i, i]
    return np.sum(x * x)


def gauss_seidel_energy_jax(a, b):
    x = jnp.zeros_like(b)
    n = b.shape[0]
    for _ in range(30):
        for i in range(n):
            s = b[i] - jnp.sum(a[i] * x) + a[i, i] * x[i]
            x = x.at[i].set(s / a[i, i])
    return jnp.sum(x * x)


def _dominant_args(rng, n=4):
    a = rng.standard_normal((n, n)) * 0.3
    a += np.diag(2.0 + rng.uniform(0.0, 1.0, n))
    return a, rng.standard_normal(n)


program(FAMILY, "gauss-seidel-energy", gauss_seidel_energy, gauss_seidel_energy_jax, _dominant_args,
        wrt=(0, 1), rtol=1e-8)


@njit
def column_sweeps(a):
    # two reductions over one column in sibling loops, then the column relaxed: a sweep
    b = a.copy()
    s = 0.0
    for _ in range(3):
        u = 0.0
        for i in range(b.shape[0]):
            u += b[i, 0] * b[i, 0]
        v = 0.0
        for i in range(b.shape[0]):
            v += math.sin(b[i, 0])
        s += u * v
        for i in range(b.shape[0]):
            b[i, 0] = 0.5 * b[i, 0] + b[i, 1]
    return s


def column_sweeps_jax(a):
    b, s = a, 0.0
    for _ in range(3):
        s = s + jnp.sum(b[:, 0] ** 2) * jnp.sum(jnp.sin(b[:, 0]))
        b = b.at[:, 0].set(0.5 * b[:, 0] + b[:, 1])
    return s


program(FAMILY, "column-sweeps", column_sweeps, column_sweeps_jax,
        lambda rng: (rng.standard_normal((6, 3)),), transforms=("gradient", "hvp"))


@njit
def row_sweeps(a):
    # the same along a row (contiguous loads)
    b = a.copy()
    s = 0.0
    for _ in range(3):
        u = 0.0
        for j in range(b.shape[1]):
            u += b[0, j] * b[0, j]
        v = 0.0
        for j in range(b.shape[1]):
            v += math.cos(b[0, j])
        s += u * v
        for j in range(b.shape[1]):
            b[0, j] = 0.5 * b[0, j] + b[1, j]
    return s


def row_sweeps_jax(a):
    b, s = a, 0.0
    for _ in range(3):
        s = s + jnp.sum(b[0] ** 2) * jnp.sum(jnp.cos(b[0]))
        b = b.at[0].set(0.5 * b[0] + b[1])
    return s


program(FAMILY, "row-sweeps", row_sweeps, row_sweeps_jax,
        lambda rng: (rng.standard_normal((3, 7)),), transforms=("gradient", "hvp"))


@njit
def thomas_tridiagonal(lower, diag, upper, rhs):
    n = diag.shape[0]
    c = np.empty(n)
    d = np.empty(n)
    c[0] = upper[0] / diag[0]
    d[0] = rhs[0] / diag[0]
    for i in range(1, n):
        m = diag[i] - lower[i - 1] * c[i - 1]
        if i < n - 1:
            c[i] = upper[i] / m
        d[i] = (rhs[i] - lower[i - 1] * d[i - 1]) / m
    x = np.empty(n)
    x[n - 1] = d[n - 1]
    for i in range(n - 2, -1, -1):
        x[i] = d[i] - c[i] * x[i + 1]
    return x


def thomas_tridiagonal_jax(lower, diag, upper, rhs):
    a = jnp.diag(diag) + jnp.diag(lower, -1) + jnp.diag(upper, 1)
    return jnp.linalg.solve(a, rhs)


program(FAMILY, "thomas-tridiagonal", thomas_tridiagonal, thomas_tridiagonal_jax,
        lambda rng: (rng.standard_normal(4) * 0.5, 3.0 + rng.uniform(0.0, 1.0, 5),
                     rng.standard_normal(4) * 0.5,
                     rng.standard_normal(5)), wrt=(1, 3), transforms=ARRAY, rtol=1e-8)


@njit
def cholesky_logdet(a):
    n = a.shape[0]
    low = np.zeros_like(a)
    for j in range(n):
        s = a[j, j]
        for k in range(j):
            s -= low[j, k] * low[j, k]
        low[j, j] = math.sqrt(s)
        for i in range(j + 1, n):
            t = a[i, j]
            for k in range(j):
                t -= low[i, k] * low[j, k]
            low[i, j] = t / low[j, j]
    ld = 0.0
    for j in range(n):
        ld += 2.0 * math.log(low[j, j])
    return ld


def cholesky_logdet_jax(a):
    # Only the lower triangle is read, as in the loops.
    sym = jnp.tril(a) + jnp.tril(a, -1).T
    return jnp.linalg.slogdet(sym)[1]


def _spd_args(rng, n=4):
    b = rng.standard_normal((n, n))
    return b @ b.T + n * np.eye(n),


program(FAMILY, "cholesky-logdet", cholesky_logdet, cholesky_logdet_jax, _spd_args,
        transforms=SMOOTH, rtol=1e-8)


@njit
def lu_solve_loops(a, b):
    # Doolittle LU without pivoting (the matrix is diagonally dominant), then two sweeps.
    n = a.shape[0]
    lu = a.copy()
    for k in range(n):
        for i in range(k + 1, n):
            lu[i, k] /= lu[k, k]
            for j in range(k + 1, n):
                lu[i, j] -= lu[i, k] * lu[k, j]
    y = b.copy()
    for i in range(n):
        for j in range(i):
            y[i] -= lu[i, j] * y[j]
    x = y.copy()
    for i in range(n - 1, -1, -1):
        for j in range(i + 1, n):
            x[i] -= lu[i, j] * x[j]
        x[i] /= lu[i, i]
    return x


program(FAMILY, "lu-solve-loops", lu_solve_loops, lambda a, b: jnp.linalg.solve(a, b), _dominant_args,
        wrt=(0, 1), transforms=ARRAY, rtol=1e-8)


@njit
def power_iteration(a, iters):
    n = a.shape[0]
    v = np.ones(n) / math.sqrt(n)
    w = np.empty(n)
    for _ in range(iters):
        for i in range(n):
            s = 0.0
            for j in range(n):
                s += a[i, j] * v[j]
            w[i] = s
        norm = math.sqrt(np.sum(w * w))
        for i in range(n):
            v[i] = w[i] / norm
    rq = 0.0
    for i in range(n):
        for j in range(n):
            rq += v[i] * a[i, j] * v[j]
    return rq


def power_iteration_jax(a, iters):
    v = jnp.ones(a.shape[0]) / jnp.sqrt(a.shape[0])
    for _ in range(iters):
        w = a @ v
        v = w / jnp.sqrt(jnp.sum(w * w))
    return v @ a @ v


program(FAMILY, "power-iteration", power_iteration, power_iteration_jax,
        lambda rng: (_spd_args(rng)[0], 30), transforms=SMOOTH, rtol=1e-8)


@njit
def matrix_exp_taylor(a):
    n = a.shape[0]
    result = np.eye(n)
    term = np.eye(n)
    for k in range(1, 16):
        term = term @ a / k
        result = result + term
    return result


def matrix_exp_taylor_jax(a):
    result = jnp.eye(a.shape[0])
    term = jnp.eye(a.shape[0])
    for k in range(1, 16):
        term = term @ a / k
        result = result + term
    return result


program(FAMILY, "matrix-exp-taylor", matrix_exp_taylor, matrix_exp_taylor_jax,
        lambda rng: (0.4 * rng.standard_normal((3, 3)),), transforms=ARRAY)


# ------------------------------------------------------------------ interpolation
@njit
def linear_interp_search(t, xp, fp):
    out = np.empty_like(t)
    for k in range(t.shape[0]):
        j = 0
        while j < xp.shape[0] - 2 and xp[j + 1] < t[k]:
            j += 1
        w = (t[k] - xp[j]) / (xp[j + 1] - xp[j])
        out[k] = (1.0 - w) * fp[j] + w * fp[j + 1]
    return out


program(FAMILY, "linear-interp-search", linear_interp_search, lambda t, xp, fp: jnp.interp(t, xp, fp),
        lambda rng: (away(rng, 5, 0.05, 3.95, (1.0, 2.0, 3.0), 0.05), np.arange(5.0), rng.standard_normal(5)),
        wrt=(0, 2), transforms=ARRAY)


@njit
def bilinear_sample(grid, px, py):
    total = 0.0
    for k in range(px.shape[0]):
        i = int(math.floor(py[k]))
        j = int(math.floor(px[k]))
        fy = py[k] - i
        fx = px[k] - j
        v = ((1.0 - fy) * ((1.0 - fx) * grid[i, j] + fx * grid[i, j + 1])
             + fy * ((1.0 - fx) * grid[i + 1, j] + fx * grid[i + 1, j + 1]))
        total += v * v
    return total


def bilinear_sample_jax(grid, px, py):
    i = jnp.floor(py).astype(int)
    j = jnp.floor(px).astype(int)
    fy, fx = py - i, px - j
    v = ((1.0 - fy) * ((1.0 - fx) * grid[i, j] + fx * grid[i, j + 1])
         + fy * ((1.0 - fx) * grid[i + 1, j] + fx * grid[i + 1, j + 1]))
    return jnp.sum(v * v)


program(FAMILY, "bilinear-sample", bilinear_sample, bilinear_sample_jax,
        lambda rng: (rng.standard_normal((5, 6)), away(rng, 6, 0.1, 4.9, (1.0, 2.0, 3.0, 4.0), 0.05),
                     away(rng, 6, 0.1, 3.9, (1.0, 2.0, 3.0), 0.05)), wrt=(0, 1, 2))


# ------------------------------------------------------------------ ODEs and cumulative products
@njit
def logistic_growth_rk4(r, k, y0):
    y = y0
    h = 0.1
    for _ in range(50):
        k1 = r * y * (1.0 - y / k)
        y2 = y + 0.5 * h * k1
        k2 = r * y2 * (1.0 - y2 / k)
        y3 = y + 0.5 * h * k2
        k3 = r * y3 * (1.0 - y3 / k)
        y4 = y + h * k3
        k4 = r * y4 * (1.0 - y4 / k)
        y += h / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)
    return y


def logistic_growth_rk4_jax(r, k, y0):
    def f(y):
        return r * y * (1.0 - y / k)

    def step(_, y):
        k1 = f(y)
        k2 = f(y + 0.05 * k1)
        k3 = f(y + 0.05 * k2)
        k4 = f(y + 0.1 * k3)
        return y + 0.1 / 6.0 * (k1 + 2.0 * k2 + 2.0 * k3 + k4)

    return jax.lax.fori_loop(0, 50, step, y0 + 0.0 * r * k)


program(FAMILY, "logistic-growth-rk4", logistic_growth_rk4, logistic_growth_rk4_jax,
        lambda rng: (float(rng.uniform(0.5, 1.5)), float(rng.uniform(5.0, 10.0)), 0.5), wrt=(0, 1, 2))
program(FAMILY, "logistic-growth-rk4-hvp", logistic_growth_rk4, logistic_growth_rk4_jax,
        lambda rng: (float(rng.uniform(0.5, 1.5)), 8.0, 0.5), transforms=SMOOTH)


@njit
def lotka_volterra_euler(params, state0):
    prey = state0[0]
    pred = state0[1]
    out = np.empty((20, 2))
    for t in range(20):
        for _ in range(5):
            dprey = params[0] * prey - params[1] * prey * pred
            dpred = params[2] * prey * pred - params[3] * pred
            prey += 0.02 * dprey
            pred += 0.02 * dpred
        out[t, 0] = prey
        out[t, 1] = pred
    return out


def lotka_volterra_euler_jax(params, state0):
    prey, pred = state0[0], state0[1]
    rows = []
    for _ in range(20):
        for _ in range(5):
            dprey = params[0] * prey - params[1] * prey * pred
            dpred = params[2] * prey * pred - params[3] * pred
            prey, pred = prey + 0.02 * dprey, pred + 0.02 * dpred
        rows.append(jnp.stack([prey, pred]))
    return jnp.stack(rows)


program(FAMILY, "lotka-volterra-euler", lotka_volterra_euler, lotka_volterra_euler_jax,
        lambda rng: (np.array([1.1, 0.4, 0.1, 0.4]) * rng.uniform(0.9, 1.1, 4), np.array([10.0, 5.0])),
        wrt=(0, 1), transforms=ARRAY, rtol=1e-8)


@njit
def compound_growth(rates, principal):
    g = np.cumprod(1.0 + rates)
    return principal * g


program(FAMILY, "compound-growth", compound_growth, lambda r, p: p * jnp.cumprod(1.0 + r),
        lambda rng: (rng.uniform(-0.05, 0.1, 8), 100.0), wrt=(0, 1), transforms=ARRAY)


@njit
def prefix_sum_loss(x):
    c = np.cumsum(x)
    s = 0.0
    for i in range(c.shape[0]):
        s += math.sin(c[i]) * (i + 1)
    return s


def prefix_sum_loss_jax(x):
    return jnp.sum(jnp.sin(jnp.cumsum(x)) * (jnp.arange(x.shape[0]) + 1.0))


program(FAMILY, "prefix-sum-loss", prefix_sum_loss, prefix_sum_loss_jax,
        lambda rng: (rng.standard_normal(9),), transforms=SMOOTH)


# ------------------------------------------------------------------ in-place sweeps reading ahead
# Each element is updated from the one the loop overwrites next: Enzyme read it again after the loop had overwritten
# it, and these gradients were silently wrong until 2026-12-06 (tests/test_read_ahead.py).
@njit
def american_put(S0, r, sig):
    n, K, T = 40, 105.0, 1.0
    dt = T / n
    u = math.exp(sig * math.sqrt(dt))
    d = 1.0 / u
    p = (math.exp(r * dt) - d) / (u - d)
    disc = math.exp(-r * dt)
    V = np.empty(n + 1)
    for i in range(n + 1):
        V[i] = max(K - S0 * u ** (n - i) * d ** i, 0.0)
    for step in range(n - 1, -1, -1):
        for i in range(step + 1):
            V[i] = max(disc * (p * V[i] + (1.0 - p) * V[i + 1]), K - S0 * u ** (step - i) * d ** i)
    return V[0]


def american_put_jax(S0, r, sig):
    n, K, T = 40, 105.0, 1.0
    dt = T / n
    u = jnp.exp(sig * jnp.sqrt(dt))
    d = 1.0 / u
    p = (jnp.exp(r * dt) - d) / (u - d)
    disc = jnp.exp(-r * dt)
    i = jnp.arange(n + 1)
    V = jnp.maximum(K - S0 * u ** (n - i) * d ** i, 0.0)
    for step in range(n - 1, -1, -1):
        i = jnp.arange(step + 1)
        V = jnp.maximum(disc * (p * V[:-1] + (1.0 - p) * V[1:]), K - S0 * u ** (step - i) * d ** i)
    return V[0]



program(FAMILY, "american-put-binomial", american_put, american_put_jax,
        lambda rng: (float(rng.uniform(95.0, 100.0)), float(rng.uniform(0.02, 0.04)), float(rng.uniform(0.2, 0.3))),
        wrt=(0, 1, 2), transforms=SMOOTH, rtol=1e-8)


@njit
def _values_of_rewards(x):
    return np.exp(x * 0.5)


@njit
def value_iteration(gamma, rewards):
    """In-place value iteration on a chain whose helper makes the values."""
    v = _values_of_rewards(rewards)
    for _ in range(4):
        for s in range(v.size - 1):
            v[s] = rewards[s] + gamma * max(v[s], v[s + 1])
    return np.sum(v)


def value_iteration_jax(gamma, rewards):
    v = jnp.exp(rewards * 0.5)
    for _ in range(4):
        v = v.at[:-1].set(rewards[:-1] + gamma * jnp.maximum(v[:-1], v[1:]))
    return jnp.sum(v)


program(FAMILY, "value-iteration-in-place", value_iteration, value_iteration_jax,
        lambda rng: (float(rng.uniform(0.8, 0.95)), rng.standard_normal(7) * 0.5), wrt=(0, 1), transforms=SMOOTH,
        rtol=1e-8)
