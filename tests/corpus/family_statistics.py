"""Statistics: log-likelihoods (Gaussian, Poisson, logistic, Student-t, GARCH, Kalman),
stable log-sum-exp and softmax, online moments, robust losses, cumulative-sum statistics.

Each program is a Numba function and a ``jax.numpy`` twin computing the same value.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from numba import njit

from corpus.margins import away, distinct
from corpus.program import program

FAMILY = "statistics"
SMOOTH = ("gradient", "hvp")
ARRAY = ("jacobian", "jvp", "vjp")
LOG_2PI = math.log(2.0 * math.pi)


# ------------------------------------------------------------------ Gaussian
@njit
def gaussian_loglik(theta, x):
    mu = theta[0]
    log_sigma = theta[1]
    inv = math.exp(-log_sigma)
    s = 0.0
    for i in range(x.shape[0]):
        z = (x[i] - mu) * inv
        s += -0.5 * z * z - log_sigma - 0.5 * LOG_2PI
    return s


def gaussian_loglik_jax(theta, x):
    z = (x - theta[0]) * jnp.exp(-theta[1])
    return jnp.sum(-0.5 * z * z - theta[1] - 0.5 * LOG_2PI)


def _gaussian_args(rng):
    return np.array([0.3, -0.2]) + 0.1 * rng.standard_normal(2), 0.8 * rng.standard_normal(20) + 0.3


program(FAMILY, "gaussian-loglik", gaussian_loglik, gaussian_loglik_jax, _gaussian_args,
        wrt=(0, 1))
program(FAMILY, "gaussian-loglik-hvp", gaussian_loglik, gaussian_loglik_jax, _gaussian_args,
        transforms=SMOOTH)


@njit
def gaussian_loglik_f32(theta, x):
    s = np.float32(0.0)
    for i in range(x.shape[0]):
        z = (x[i] - theta[0]) / theta[1]
        s += np.float32(-0.5) * z * z - math.log(theta[1])
    return s


def gaussian_loglik_f32_jax(theta, x):
    z = (x - theta[0]) / theta[1]
    return jnp.sum(-0.5 * z * z - jnp.log(theta[1]))


program(FAMILY, "gaussian-loglik-f32", gaussian_loglik_f32, gaussian_loglik_f32_jax,
        lambda rng: (np.array([0.2, 1.3], dtype=np.float32), rng.standard_normal(16).astype(np.float32)),
        wrt=(0, 1), rtol=1e-4, atol=1e-4)


@njit
def gaussian_mixture_naive(params, x):
    # Two components, density summed directly (no max shift).
    w = 1.0 / (1.0 + math.exp(-params[0]))
    mu1, mu2 = params[1], params[2]
    s1, s2 = math.exp(params[3]), math.exp(params[4])
    ll = 0.0
    for i in range(x.shape[0]):
        p1 = w * math.exp(-0.5 * ((x[i] - mu1) / s1) ** 2) / s1
        p2 = (1.0 - w) * math.exp(-0.5 * ((x[i] - mu2) / s2) ** 2) / s2
        ll += math.log(p1 + p2)
    return ll


def gaussian_mixture_naive_jax(params, x):
    w = jax.nn.sigmoid(params[0])
    s1, s2 = jnp.exp(params[3]), jnp.exp(params[4])
    p1 = w * jnp.exp(-0.5 * ((x - params[1]) / s1) ** 2) / s1
    p2 = (1.0 - w) * jnp.exp(-0.5 * ((x - params[2]) / s2) ** 2) / s2
    return jnp.sum(jnp.log(p1 + p2))


def _mixture_args(rng):
    x = np.concatenate([rng.normal(-1.0, 0.5, 8), rng.normal(1.5, 0.7, 8)])
    return np.array([0.1, -1.0, 1.4, -0.6, -0.3]) + 0.05 * rng.standard_normal(5), x


program(FAMILY, "gaussian-mixture-naive", gaussian_mixture_naive, gaussian_mixture_naive_jax,
        _mixture_args, transforms=SMOOTH)


@njit
def gaussian_mixture_stable(params, x):
    # Per point: log(w1 N1 + w2 N2) by the two-term max shift.
    w = 1.0 / (1.0 + math.exp(-params[0]))
    lw1 = math.log(w)
    lw2 = math.log(1.0 - w)
    ll = 0.0
    for i in range(x.shape[0]):
        a = lw1 - 0.5 * ((x[i] - params[1]) / math.exp(params[3])) ** 2 - params[3]
        b = lw2 - 0.5 * ((x[i] - params[2]) / math.exp(params[4])) ** 2 - params[4]
        m = max(a, b)
        ll += m + math.log(math.exp(a - m) + math.exp(b - m))
    return ll


def gaussian_mixture_stable_jax(params, x):
    w = jax.nn.sigmoid(params[0])
    a = jnp.log(w) - 0.5 * ((x - params[1]) / jnp.exp(params[3])) ** 2 - params[3]
    b = jnp.log(1.0 - w) - 0.5 * ((x - params[2]) / jnp.exp(params[4])) ** 2 - params[4]
    return jnp.sum(jnp.logaddexp(a, b))


program(FAMILY, "gaussian-mixture-stable", gaussian_mixture_stable, gaussian_mixture_stable_jax,
        _mixture_args, transforms=SMOOTH)


# ------------------------------------------------------------------ GLMs
@njit
def poisson_glm(beta, features, counts):
    ll = 0.0
    for i in range(features.shape[0]):
        eta = 0.0
        for j in range(features.shape[1]):
            eta += features[i, j] * beta[j]
        ll += counts[i] * eta - math.exp(eta) - math.lgamma(counts[i] + 1.0)
    return ll


def poisson_glm_jax(beta, features, counts):
    eta = features @ beta
    return jnp.sum(counts * eta - jnp.exp(eta) - gammaln(counts + 1.0))


def _glm_args(rng, n=20, p=3):
    features = rng.standard_normal((n, p)) * 0.5
    beta = rng.standard_normal(p) * 0.5
    counts = rng.poisson(np.exp(features @ beta)).astype(np.float64)
    return beta, features, counts


program(FAMILY, "poisson-glm", poisson_glm, poisson_glm_jax, _glm_args, transforms=SMOOTH)


@njit
def logistic_loglik(w, features, labels):
    ll = 0.0
    for i in range(features.shape[0]):
        z = 0.0
        for j in range(w.shape[0]):
            z += features[i, j] * w[j]
        # log(1 + exp(z)), evaluated without overflow on either side
        if z > 0.0:
            log1pexp = z + math.log1p(math.exp(-z))
        else:
            log1pexp = math.log1p(math.exp(z))
        ll += labels[i] * z - log1pexp
    return ll


def logistic_loglik_jax(w, features, labels):
    z = features @ w
    return jnp.sum(labels * z - jnp.logaddexp(0.0, z))


def _logistic_args(rng, n=24, p=4):
    features = rng.standard_normal((n, p))
    w = rng.standard_normal(p)
    labels = (rng.uniform(size=n) < 1.0 / (1.0 + np.exp(-features @ w))).astype(np.float64)
    return w, features, labels


program(FAMILY, "logistic-loglik", logistic_loglik, logistic_loglik_jax, _logistic_args,
        wrt=(0, 1))
program(FAMILY, "logistic-loglik-hvp", logistic_loglik, logistic_loglik_jax, _logistic_args,
        transforms=SMOOTH)


@njit
def student_t_loglik(theta, x):
    mu = theta[0]
    scale = math.exp(theta[1])
    nu = math.exp(theta[2])
    const = math.lgamma(0.5 * (nu + 1.0)) - math.lgamma(0.5 * nu) - 0.5 * math.log(nu * math.pi)
    ll = 0.0
    for i in range(x.shape[0]):
        z = (x[i] - mu) / scale
        ll += const - math.log(scale) - 0.5 * (nu + 1.0) * math.log1p(z * z / nu)
    return ll


def student_t_loglik_jax(theta, x):
    scale, nu = jnp.exp(theta[1]), jnp.exp(theta[2])
    z = (x - theta[0]) / scale
    const = gammaln(0.5 * (nu + 1.0)) - gammaln(0.5 * nu) - 0.5 * jnp.log(nu * jnp.pi)
    return jnp.sum(const - jnp.log(scale) - 0.5 * (nu + 1.0) * jnp.log1p(z * z / nu))


program(FAMILY, "student-t-loglik", student_t_loglik, student_t_loglik_jax,
        lambda rng: (np.array([0.1, 0.2, 1.2]), rng.standard_t(4.0, 18)), wrt=(0, 1), rtol=1e-8)
program(FAMILY, "student-t-loglik-hvp", student_t_loglik, student_t_loglik_jax,
        lambda rng: (np.array([0.1, 0.2, 1.2]), rng.standard_t(4.0, 18)), transforms=SMOOTH, rtol=1e-8)


@njit
def negative_binomial_loglik(theta, counts):
    mean = math.exp(theta[0])
    r = math.exp(theta[1])
    ll = 0.0
    for i in range(counts.shape[0]):
        k = counts[i]
        ll += (math.lgamma(k + r) - math.lgamma(r) - math.lgamma(k + 1.0)
               + r * math.log(r / (r + mean)) + k * math.log(mean / (r + mean)))
    return ll


def negative_binomial_loglik_jax(theta, counts):
    mean, r = jnp.exp(theta[0]), jnp.exp(theta[1])
    return jnp.sum(gammaln(counts + r) - gammaln(r) - gammaln(counts + 1.0)
                   + r * jnp.log(r / (r + mean)) + counts * jnp.log(mean / (r + mean)))


program(FAMILY, "negative-binomial-loglik", negative_binomial_loglik, negative_binomial_loglik_jax,
        lambda rng: (np.array([1.0, 0.5]), rng.negative_binomial(2, 0.4, 15).astype(np.float64)),
        transforms=SMOOTH, rtol=1e-8)


@njit
def beta_loglik(theta, x):
    a = math.exp(theta[0])
    b = math.exp(theta[1])
    lbeta = math.lgamma(a) + math.lgamma(b) - math.lgamma(a + b)
    ll = 0.0
    for i in range(x.shape[0]):
        ll += (a - 1.0) * math.log(x[i]) + (b - 1.0) * math.log1p(-x[i]) - lbeta
    return ll


def beta_loglik_jax(theta, x):
    a, b = jnp.exp(theta[0]), jnp.exp(theta[1])
    lbeta = gammaln(a) + gammaln(b) - gammaln(a + b)
    return jnp.sum((a - 1.0) * jnp.log(x) + (b - 1.0) * jnp.log1p(-x) - lbeta)


program(FAMILY, "beta-loglik", beta_loglik, beta_loglik_jax,
        lambda rng: (np.array([0.7, 0.3]), rng.beta(2.0, 1.5, 14)), transforms=SMOOTH, rtol=1e-8)


@njit
def cauchy_loglik(loc, scale, x):
    ll = 0.0
    for i in range(x.shape[0]):
        z = (x[i] - loc) / scale
        ll -= math.log(math.pi * scale * (1.0 + z * z))
    return ll


def cauchy_loglik_jax(loc, scale, x):
    z = (x - loc) / scale
    return -jnp.sum(jnp.log(jnp.pi * scale * (1.0 + z * z)))


program(FAMILY, "cauchy-loglik", cauchy_loglik, cauchy_loglik_jax,
        lambda rng: (0.2, 1.1, rng.standard_cauchy(12)), wrt=(0, 1, 2))


# ------------------------------------------------------------------ time series
@njit
def ar1_loglik(phi, log_sigma, x):
    sigma2 = math.exp(2.0 * log_sigma)
    ll = 0.0
    for t in range(1, x.shape[0]):
        e = x[t] - phi * x[t - 1]
        ll += -0.5 * (e * e / sigma2 + math.log(sigma2) + LOG_2PI)
    return ll


def ar1_loglik_jax(phi, log_sigma, x):
    sigma2 = jnp.exp(2.0 * log_sigma)
    e = x[1:] - phi * x[:-1]
    return jnp.sum(-0.5 * (e * e / sigma2 + jnp.log(sigma2) + LOG_2PI))


program(FAMILY, "ar1-loglik", ar1_loglik, ar1_loglik_jax,
        lambda rng: (0.6, -0.1, np.cumsum(rng.standard_normal(25)) * 0.3), wrt=(0, 1, 2))


@njit
def garch11_loglik(params, r):
    omega = math.exp(params[0])
    alpha = 1.0 / (1.0 + math.exp(-params[1]))
    beta = (1.0 - alpha) / (1.0 + math.exp(-params[2]))
    var = omega / (1.0 - alpha - beta)
    ll = 0.0
    for t in range(r.shape[0]):
        ll += -0.5 * (math.log(var) + r[t] * r[t] / var)
        var = omega + alpha * r[t] * r[t] + beta * var
    return ll


def garch11_loglik_jax(params, r):
    omega = jnp.exp(params[0])
    alpha = jax.nn.sigmoid(params[1])
    beta = (1.0 - alpha) * jax.nn.sigmoid(params[2])

    def step(var, rt):
        return omega + alpha * rt * rt + beta * var, -0.5 * (jnp.log(var) + rt * rt / var)

    _, terms = jax.lax.scan(step, omega / (1.0 - alpha - beta), r)
    return jnp.sum(terms)


program(FAMILY, "garch11-loglik", garch11_loglik, garch11_loglik_jax,
        lambda rng: (np.array([-2.0, -1.5, 1.5]), 0.2 * rng.standard_normal(30)), transforms=SMOOTH,
        rtol=1e-8)


@njit
def kalman_loglik(log_q, log_r, y):
    q = math.exp(log_q)
    r = math.exp(log_r)
    m = 0.0
    p = 1.0
    ll = 0.0
    for t in range(y.shape[0]):
        p = p + q
        s = p + r
        v = y[t] - m
        ll += -0.5 * (math.log(2.0 * math.pi * s) + v * v / s)
        k = p / s
        m = m + k * v
        p = (1.0 - k) * p
    return ll


def kalman_loglik_jax(log_q, log_r, y):
    q, r = jnp.exp(log_q), jnp.exp(log_r)

    def step(state, yt):
        m, p = state
        p = p + q
        s = p + r
        v = yt - m
        k = p / s
        return (m + k * v, (1.0 - k) * p), -0.5 * (jnp.log(2.0 * jnp.pi * s) + v * v / s)

    _, terms = jax.lax.scan(step, (0.0 * q, 1.0 + 0.0 * q), y)
    return jnp.sum(terms)


program(FAMILY, "kalman-loglik", kalman_loglik, kalman_loglik_jax,
        lambda rng: (-1.0, -0.5, np.cumsum(0.4 * rng.standard_normal(20)) + 0.6 * rng.standard_normal(20)),
        wrt=(0, 1, 2))


@njit
def ema_filter(x, alpha):
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = alpha * x[i] + (1.0 - alpha) * out[i - 1]
    return out


def ema_filter_jax(x, alpha):
    def step(prev, xi):
        new = alpha * xi + (1.0 - alpha) * prev
        return new, new

    _, rest = jax.lax.scan(step, x[0], x[1:])
    return jnp.concatenate([x[:1], rest])


program(FAMILY, "ema-filter", ema_filter, ema_filter_jax,
        lambda rng: (rng.standard_normal(8), 0.3), wrt=(0, 1), transforms=ARRAY)


@njit
def ema_loss(x, alpha):
    # a loss through the filter: the reverse sweep reads back the out[i - 1] the loop wrote
    out = np.empty_like(x)
    out[0] = x[0]
    for i in range(1, x.shape[0]):
        out[i] = alpha * x[i] + (1.0 - alpha) * out[i - 1]
    return np.sum((out - x) ** 2)


program(FAMILY, "ema-loss", ema_loss, lambda x, alpha: jnp.sum((ema_filter_jax(x, alpha) - x) ** 2),
        lambda rng: (rng.standard_normal(9), 0.3), wrt=(0, 1), transforms=SMOOTH)


@njit
def ar2_filter(x, a):
    # a second-order recurrence (an AR(2) filter with a double root at a / 2)
    y = np.empty_like(x)
    y[0] = x[0]
    y[1] = x[1]
    for i in range(2, x.shape[0]):
        y[i] = x[i] + a * y[i - 1] - 0.25 * a * a * y[i - 2]
    return y


def ar2_filter_jax(x, a):
    def step(carry, xi):
        y1, y2 = carry
        y = xi + a * y1 - 0.25 * a * a * y2
        return (y, y1), y

    _, rest = jax.lax.scan(step, (x[1], x[0]), x[2:])
    return jnp.concatenate([x[:2], rest])


program(FAMILY, "ar2-filter", ar2_filter, ar2_filter_jax,
        lambda rng: (rng.standard_normal(9), 0.6), wrt=(0, 1), transforms=ARRAY)


@njit
def reverse_ema_filter(x, alpha):
    # the filter run from the end (a backward pass of a smoother): out[i] reads out[i + 1]
    n = x.shape[0]
    out = np.empty_like(x)
    out[n - 1] = x[n - 1]
    for i in range(n - 2, -1, -1):
        out[i] = alpha * x[i] + (1.0 - alpha) * out[i + 1]
    return out


program(FAMILY, "reverse-ema-filter", reverse_ema_filter,
        lambda x, alpha: ema_filter_jax(x[::-1], alpha)[::-1],
        lambda rng: (rng.standard_normal(8), 0.4), wrt=(0, 1), transforms=ARRAY)


@njit
def autocorrelation(x, max_lag):
    n = x.shape[0]
    m = np.mean(x)
    c0 = 0.0
    for i in range(n):
        c0 += (x[i] - m) ** 2
    out = np.empty(max_lag)
    for k in range(1, max_lag + 1):
        c = 0.0
        for i in range(n - k):
            c += (x[i] - m) * (x[i + k] - m)
        out[k - 1] = c / c0
    return out


def autocorrelation_jax(x, max_lag):
    d = x - jnp.mean(x)
    c0 = jnp.sum(d * d)
    return jnp.stack([jnp.sum(d[:-k] * d[k:]) / c0 for k in range(1, max_lag + 1)])


program(FAMILY, "autocorrelation", autocorrelation, autocorrelation_jax,
        lambda rng: (rng.standard_normal(12), 3), transforms=ARRAY)


# ------------------------------------------------------------------ log-sum-exp and softmax
@njit
def logsumexp_running_max_if(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


program(FAMILY, "logsumexp-running-max-if", logsumexp_running_max_if,
        lambda x: jax.scipy.special.logsumexp(x), lambda rng: (distinct(rng, 10, -3.0, 3.0),),
        transforms=SMOOTH)


@njit
def logsumexp_running_max_builtin(x):
    m = -np.inf
    for i in range(x.shape[0]):
        m = max(m, x[i])
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i] - m)
    return m + math.log(s)


program(FAMILY, "logsumexp-running-max-builtin", logsumexp_running_max_builtin,
        lambda x: jax.scipy.special.logsumexp(x), lambda rng: (distinct(rng, 10, -3.0, 3.0),),
        transforms=SMOOTH)


@njit
def logsumexp_np_max(x):
    m = np.max(x)
    return m + math.log(np.sum(np.exp(x - m)))


program(FAMILY, "logsumexp-np-max", logsumexp_np_max, lambda x: jax.scipy.special.logsumexp(x),
        lambda rng: (distinct(rng, 10, -3.0, 3.0),), transforms=SMOOTH)


@njit
def logsumexp_naive(x):
    s = 0.0
    for i in range(x.shape[0]):
        s += math.exp(x[i])
    return math.log(s)


program(FAMILY, "logsumexp-naive", logsumexp_naive, lambda x: jax.scipy.special.logsumexp(x),
        lambda rng: (rng.standard_normal(10),), transforms=SMOOTH)


@njit
def logsumexp_online(x):
    # One pass: rescale the running sum whenever the running max grows.
    m = x[0]
    s = 1.0
    for i in range(1, x.shape[0]):
        if x[i] > m:
            s = s * math.exp(m - x[i]) + 1.0
            m = x[i]
        else:
            s += math.exp(x[i] - m)
    return m + math.log(s)


program(FAMILY, "logsumexp-online", logsumexp_online, lambda x: jax.scipy.special.logsumexp(x),
        lambda rng: (distinct(rng, 10, -3.0, 3.0),), transforms=SMOOTH)


@njit
def logsumexp_rows(a):
    out = np.empty(a.shape[0])
    for i in range(a.shape[0]):
        m = a[i, 0]
        for j in range(1, a.shape[1]):
            m = max(m, a[i, j])
        s = 0.0
        for j in range(a.shape[1]):
            s += math.exp(a[i, j] - m)
        out[i] = m + math.log(s)
    return out


program(FAMILY, "logsumexp-rows", logsumexp_rows, lambda a: jax.scipy.special.logsumexp(a, axis=1),
        lambda rng: (distinct(rng, 15, -3.0, 3.0).reshape(3, 5),), transforms=ARRAY)


@njit
def softmax_stable(x):
    m = x[0]
    for i in range(1, x.shape[0]):
        if x[i] > m:
            m = x[i]
    out = np.empty_like(x)
    s = 0.0
    for i in range(x.shape[0]):
        out[i] = math.exp(x[i] - m)
        s += out[i]
    for i in range(x.shape[0]):
        out[i] /= s
    return out


program(FAMILY, "softmax-stable", softmax_stable, lambda x: jax.nn.softmax(x),
        lambda rng: (distinct(rng, 7, -3.0, 3.0),), transforms=ARRAY)


@njit
def softmax_rows_2d(a):
    out = np.empty_like(a)
    for i in range(a.shape[0]):
        m = -np.inf
        for j in range(a.shape[1]):
            m = max(m, a[i, j])
        s = 0.0
        for j in range(a.shape[1]):
            out[i, j] = math.exp(a[i, j] - m)
            s += out[i, j]
        for j in range(a.shape[1]):
            out[i, j] /= s
    return out


program(FAMILY, "softmax-rows-2d", softmax_rows_2d, lambda a: jax.nn.softmax(a, axis=1),
        lambda rng: (distinct(rng, 12, -3.0, 3.0).reshape(3, 4),), transforms=ARRAY)


@njit
def softmax_naive(x):
    e = np.exp(x)
    return e / np.sum(e)


program(FAMILY, "softmax-naive", softmax_naive, lambda x: jax.nn.softmax(x),
        lambda rng: (rng.standard_normal(6),), transforms=ARRAY)


@njit
def log_softmax_weighted(x, w):
    m = np.max(x)
    lse = m + math.log(np.sum(np.exp(x - m)))
    s = 0.0
    for i in range(x.shape[0]):
        s += w[i] * (x[i] - lse)
    return s


def log_softmax_weighted_jax(x, w):
    return jnp.sum(w * jax.nn.log_softmax(x))


program(FAMILY, "log-softmax-weighted", log_softmax_weighted, log_softmax_weighted_jax,
        lambda rng: (distinct(rng, 8, -3.0, 3.0), rng.uniform(0.0, 1.0, 8)), wrt=(0, 1))


# ------------------------------------------------------------------ online moments and robust losses
@njit
def welford_variance(x):
    mean = 0.0
    m2 = 0.0
    for i in range(x.shape[0]):
        delta = x[i] - mean
        mean += delta / (i + 1)
        m2 += delta * (x[i] - mean)
    return m2 / (x.shape[0] - 1)


program(FAMILY, "welford-variance", welford_variance, lambda x: jnp.var(x, ddof=1),
        lambda rng: (rng.standard_normal(15) * 2.0 + 1.0,), transforms=SMOOTH)


@njit
def weighted_moments(x, w):
    sw = 0.0
    sx = 0.0
    for i in range(x.shape[0]):
        sw += w[i]
        sx += w[i] * x[i]
    mean = sx / sw
    v = 0.0
    for i in range(x.shape[0]):
        v += w[i] * (x[i] - mean) ** 2
    return math.sqrt(v / sw) + mean


def weighted_moments_jax(x, w):
    mean = jnp.sum(w * x) / jnp.sum(w)
    return jnp.sqrt(jnp.sum(w * (x - mean) ** 2) / jnp.sum(w)) + mean


program(FAMILY, "weighted-moments", weighted_moments, weighted_moments_jax,
        lambda rng: (rng.standard_normal(10), rng.uniform(0.2, 2.0, 10)), wrt=(0, 1))


@njit
def huber_loss(pred, target, delta):
    s = 0.0
    for i in range(pred.shape[0]):
        r = pred[i] - target[i]
        if abs(r) <= delta:
            s += 0.5 * r * r
        else:
            s += delta * (abs(r) - 0.5 * delta)
    return s


def huber_loss_jax(pred, target, delta):
    r = jnp.abs(pred - target)
    return jnp.sum(jnp.where(r <= delta, 0.5 * r * r, delta * (r - 0.5 * delta)))


def _huber_args(rng):
    target = rng.standard_normal(14)
    return target + away(rng, 14, -3.0, 3.0, (-1.0, 0.0, 1.0), 0.1), target, 1.0


program(FAMILY, "huber-loss", huber_loss, huber_loss_jax, _huber_args, wrt=(0, 1))


@njit
def pinball_loss(pred, target, tau):
    s = 0.0
    for i in range(pred.shape[0]):
        r = target[i] - pred[i]
        s += tau * r if r >= 0.0 else (tau - 1.0) * r
    return s / pred.shape[0]


def pinball_loss_jax(pred, target, tau):
    r = target - pred
    return jnp.mean(jnp.where(r >= 0.0, tau * r, (tau - 1.0) * r))


def _pinball_args(rng):
    target = rng.standard_normal(12)
    return target + away(rng, 12, -2.0, 2.0, (0.0,), 0.1), target, 0.3


program(FAMILY, "pinball-loss", pinball_loss, pinball_loss_jax, _pinball_args, wrt=(0, 1, 2))


@njit
def kde_loglik(x, data, bandwidth):
    ll = 0.0
    n = data.shape[0]
    for i in range(x.shape[0]):
        dens = 0.0
        for j in range(n):
            z = (x[i] - data[j]) / bandwidth
            dens += math.exp(-0.5 * z * z)
        ll += math.log(dens / (n * bandwidth * math.sqrt(2.0 * math.pi)))
    return ll


def kde_loglik_jax(x, data, bandwidth):
    z = (x[:, None] - data[None, :]) / bandwidth
    dens = jnp.sum(jnp.exp(-0.5 * z * z), axis=1)
    return jnp.sum(jnp.log(dens / (data.shape[0] * bandwidth * jnp.sqrt(2.0 * jnp.pi))))


program(FAMILY, "kde-loglik", kde_loglik, kde_loglik_jax,
        lambda rng: (rng.standard_normal(5), rng.standard_normal(12), 0.6), wrt=(0, 1, 2))


# ------------------------------------------------------------------ cumulative sums
@njit
def cusum_energy(x):
    c = np.cumsum(x - np.mean(x))
    s = 0.0
    for i in range(c.shape[0]):
        s += c[i] * c[i]
    return s / x.shape[0]


def cusum_energy_jax(x):
    return jnp.mean(jnp.cumsum(x - jnp.mean(x)) ** 2)


program(FAMILY, "cusum-energy", cusum_energy, cusum_energy_jax,
        lambda rng: (rng.standard_normal(14),), transforms=SMOOTH)


@njit
def moving_average_cumsum(x, width):
    c = np.zeros(x.shape[0] + 1)
    for i in range(x.shape[0]):
        c[i + 1] = c[i] + x[i]
    out = np.empty(x.shape[0] - width + 1)
    for i in range(out.shape[0]):
        out[i] = (c[i + width] - c[i]) / width
    return out


def moving_average_cumsum_jax(x, width):
    c = jnp.concatenate([jnp.zeros(1), jnp.cumsum(x)])
    return (c[width:] - c[:-width]) / width


program(FAMILY, "moving-average-cumsum", moving_average_cumsum, moving_average_cumsum_jax,
        lambda rng: (rng.standard_normal(10), 3), transforms=ARRAY)


@njit
def log_cumsum_exp_hazard(log_h):
    # Survival log-likelihood: cumulative hazard by a running sum, events at every step.
    cum = 0.0
    ll = 0.0
    for t in range(log_h.shape[0]):
        h = math.exp(log_h[t])
        cum += h
        ll += log_h[t] - cum
    return ll


def log_cumsum_exp_hazard_jax(log_h):
    return jnp.sum(log_h - jnp.cumsum(jnp.exp(log_h)))


program(FAMILY, "cumulative-hazard", log_cumsum_exp_hazard, log_cumsum_exp_hazard_jax,
        lambda rng: (rng.standard_normal(12) - 1.0,), transforms=SMOOTH)


@njit
def cramer_von_mises_logistic(x, loc, scale):
    y = np.sort(x)
    n = y.shape[0]
    s = 1.0 / (12.0 * n)
    for i in range(n):
        f = 1.0 / (1.0 + math.exp(-(y[i] - loc) / scale))
        s += (f - (2.0 * i + 1.0) / (2.0 * n)) ** 2
    return s


def cramer_von_mises_logistic_jax(x, loc, scale):
    y = jnp.sort(x)
    n = y.shape[0]
    f = jax.nn.sigmoid((y - loc) / scale)
    return 1.0 / (12.0 * n) + jnp.sum((f - (2.0 * jnp.arange(n) + 1.0) / (2.0 * n)) ** 2)


program(FAMILY, "cramer-von-mises", cramer_von_mises_logistic, cramer_von_mises_logistic_jax,
        lambda rng: (distinct(rng, 12, -3.0, 3.0), 0.1, 1.2), wrt=(0, 1, 2))


@njit
def bayes_linreg_logpost(w, features, y, prior_prec):
    lp = 0.0
    for j in range(w.shape[0]):
        lp -= 0.5 * prior_prec * w[j] * w[j]
    for i in range(features.shape[0]):
        pred = 0.0
        for j in range(w.shape[0]):
            pred += features[i, j] * w[j]
        lp -= 0.5 * (y[i] - pred) ** 2
    return lp


def bayes_linreg_logpost_jax(w, features, y, prior_prec):
    return -0.5 * prior_prec * jnp.sum(w * w) - 0.5 * jnp.sum((y - features @ w) ** 2)


program(FAMILY, "bayes-linreg-logpost", bayes_linreg_logpost, bayes_linreg_logpost_jax,
        lambda rng: (rng.standard_normal(3), rng.standard_normal((10, 3)), rng.standard_normal(10), 2.0),
        transforms=SMOOTH)
