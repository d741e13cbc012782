"""Hamiltonian Monte Carlo written entirely in Numba, with pyjlad's gradient of the log posterior.

Bayesian logistic regression: ``y_i ~ Bernoulli(sigmoid(x_i . theta))`` with a Gaussian
prior ``theta ~ N(0, prior_sd^2 I)``, on a small synthetic dataset (``n = 200``, ``d = 3``,
fixed seed). The sampler (leapfrog integrator, Metropolis accept step, the chain loop, its
random numbers from ``np.random`` seeded inside Numba) is ``@njit`` code; it takes the
``(log posterior, gradient)`` function as an argument and calls it in every leapfrog step.
Passing it ``pyjlad.value_and_grad(log_posterior)`` links Enzyme's derivative into the
sampler: no Python runs inside the chain.

Two checks that do not use pyjlad:

- the gradient oracle: the same sampler, same seed, run with the hand-derived gradient
  ``X^T (y - sigmoid(X theta)) - theta / prior_sd^2``; the two chains agree to rounding
  (their gradients differ by ~1e-16 relative, and every accept decision is the same);
- the posterior itself: its mean and standard deviation by deterministic quadrature
  (a trapezoid grid in the coordinates of the Laplace approximation at the MAP, found by
  ``scipy.optimize`` with the analytic gradient); the HMC estimates are compared in units
  of their Monte Carlo standard error (batch means).

Run: ``python examples/hmc_logistic.py``.
"""

from __future__ import annotations

import math
import time

import numpy as np
from numba import njit

import pyjlad

N_SAMPLES, N_FEATURES, PRIOR_SD = 200, 3, 2.0


def make_data(n: int = N_SAMPLES, d: int = N_FEATURES, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Features ``x`` (a column of ones, then standard normals) and 0/1 labels from a logistic model."""
    rng = np.random.default_rng(seed)
    x = np.column_stack([np.ones(n), rng.normal(size=(n, d - 1))])
    theta_true = np.array([0.5, -1.0, 1.5])[:d]
    y = (rng.random(n) < 1.0 / (1.0 + np.exp(-x @ theta_true))).astype(np.float64)
    return x, y


@njit
def softplus(z):
    """``log(1 + e^z)`` without overflow."""
    if z > 0.0:
        return z + math.log1p(math.exp(-z))
    return math.log1p(math.exp(z))


@njit
def log_posterior(theta, x, y, prior_sd):
    """Log posterior up to a constant: ``sum_i y_i z_i - log(1 + e^z_i) - |theta|^2 / (2 prior_sd^2)``."""
    total = 0.0
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(x.shape[1]):
            z += x[i, j] * theta[j]
        total += y[i] * z - softplus(z)
    for j in range(theta.shape[0]):
        total -= 0.5 * (theta[j] / prior_sd) ** 2
    return total


value_and_gradient = pyjlad.value_and_grad(log_posterior, wrt=0)  # (theta, x, y, prior_sd) -> (logp, dlogp/dtheta)


@njit
def analytic_value_and_gradient(theta, x, y, prior_sd):
    """The same ``(log posterior, gradient)``, the gradient derived by hand (the oracle; no pyjlad)."""
    resid = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        z = 0.0
        for j in range(x.shape[1]):
            z += x[i, j] * theta[j]
        resid[i] = y[i] - 1.0 / (1.0 + math.exp(-z))
    return log_posterior(theta, x, y, prior_sd), x.T @ resid - theta / prior_sd**2


@njit
def leapfrog(vg, theta, momentum, grad, step, n_steps, x, y, prior_sd):
    """``n_steps`` leapfrog steps of the Hamiltonian ``-logp(theta) + |p|^2 / 2``; the end point."""
    theta, momentum = theta.copy(), momentum.copy()
    momentum += 0.5 * step * grad
    logp = 0.0
    for k in range(n_steps):
        theta += step * momentum
        logp, grad = vg(theta, x, y, prior_sd)
        if k < n_steps - 1:
            momentum += step * grad
    momentum += 0.5 * step * grad
    return theta, momentum, logp, grad


@njit
def hmc(vg, theta0, x, y, prior_sd, n_draws, n_warmup, step, n_steps, seed):
    """A Hamiltonian Monte Carlo chain; ``(draws, acceptance rate after warm-up)``.

    ``vg(theta, x, y, prior_sd) -> (log posterior, gradient)``. The step size is jittered
    uniformly in ``[0.8, 1.2] * step`` each iteration (avoids periodic trajectories);
    every iteration draws the same random numbers whatever is accepted, so two chains with
    the same seed and equal gradients make the same decisions.
    """
    np.random.seed(seed)
    d = theta0.shape[0]
    draws = np.empty((n_draws, d))
    theta = theta0.copy()
    logp, grad = vg(theta, x, y, prior_sd)
    accepted = 0
    for it in range(n_warmup + n_draws):
        momentum = np.random.standard_normal(d)
        eps = step * (0.8 + 0.4 * np.random.random())
        log_u = math.log(np.random.random())
        new_theta, new_momentum, new_logp, new_grad = leapfrog(vg, theta, momentum, grad, eps, n_steps,
                                                               x, y, prior_sd)
        energy_change = (-new_logp + 0.5 * np.dot(new_momentum, new_momentum)) - (
            -logp + 0.5 * np.dot(momentum, momentum))
        if log_u < -energy_change:
            theta, logp, grad = new_theta, new_logp, new_grad
            if it >= n_warmup:
                accepted += 1
        if it >= n_warmup:
            draws[it - n_warmup] = theta
    return draws, accepted / n_draws


@njit
def largest_gradient_error(draws, x, y, prior_sd):
    """Largest ``|pyjlad gradient - analytic| / max(1, |analytic|)`` over the draws."""
    worst = 0.0
    for k in range(draws.shape[0]):
        _, g = value_and_gradient(draws[k], x, y, prior_sd)
        _, h = analytic_value_and_gradient(draws[k], x, y, prior_sd)
        worst = max(worst, np.max(np.abs(g - h) / np.maximum(1.0, np.abs(h))))
    return worst


def laplace(x: np.ndarray, y: np.ndarray, prior_sd: float) -> tuple[np.ndarray, np.ndarray]:
    """MAP (``scipy.optimize``, analytic gradient) and the Cholesky factor of the inverse Hessian there."""
    from scipy.optimize import minimize

    def negative(theta):
        value, grad = analytic_value_and_gradient(theta, x, y, prior_sd)
        return -value, -grad

    theta_map = minimize(negative, np.zeros(x.shape[1]), jac=True, method="BFGS", options={"gtol": 1e-10}).x
    p = 1.0 / (1.0 + np.exp(-x @ theta_map))
    hessian = x.T @ (x * (p * (1.0 - p))[:, None]) + np.eye(x.shape[1]) / prior_sd**2
    return theta_map, np.linalg.cholesky(np.linalg.inv(hessian))


@njit
def grid_moments(center, factor, half_width, points, x, y, prior_sd):
    """Posterior mean and covariance by the trapezoid rule on ``theta = center + factor @ u``, ``u`` in a cube.

    The trapezoid rule converges geometrically for smooth integrands that decay at the
    cube's edges; the map is linear, so its Jacobian is a constant that cancels.
    """
    d = center.shape[0]
    nodes = np.linspace(-half_width, half_width, points)
    log_ref = log_posterior(center, x, y, prior_sd)
    mass, first, second = 0.0, np.zeros(d), np.zeros((d, d))
    index = np.zeros(d, dtype=np.int64)
    u = np.empty(d)
    for _ in range(points**d):
        for j in range(d):
            u[j] = nodes[index[j]]
        theta = center + factor @ u
        w = math.exp(log_posterior(theta, x, y, prior_sd) - log_ref)
        mass += w
        first += w * theta
        second += w * np.outer(theta, theta)
        for j in range(d):  # the next grid point, odometer order
            index[j] += 1
            if index[j] < points:
                break
            index[j] = 0
    mean = first / mass
    return mean, second / mass - np.outer(mean, mean)


def reference(x: np.ndarray, y: np.ndarray, prior_sd: float) -> tuple[np.ndarray, np.ndarray, float]:
    """Posterior mean, sd and the quadrature's own error (the change from a coarser, narrower grid)."""
    center, factor = laplace(x, y, prior_sd)
    mean, cov = grid_moments(center, factor, 9.0, 61, x, y, prior_sd)
    coarse_mean, coarse_cov = grid_moments(center, factor, 7.0, 36, x, y, prior_sd)
    sd = np.sqrt(np.diag(cov))
    change = max(np.max(np.abs(mean - coarse_mean)), np.max(np.abs(sd - np.sqrt(np.diag(coarse_cov)))))
    return mean, sd, float(change)


def batch_means_se(values: np.ndarray, batches: int = 50) -> np.ndarray:
    """Monte Carlo standard error of the mean of each column of a chain, by non-overlapping batch means."""
    size = values.shape[0] // batches
    means = values[: size * batches].reshape(batches, size, -1).mean(axis=1)
    return means.std(axis=0, ddof=1) / math.sqrt(batches)


def main() -> dict[str, float]:
    """Sample, compare, print; the measured errors (for the test)."""
    x, y = make_data()
    x_before, y_before = x.copy(), y.copy()
    theta0, settings = np.zeros(x.shape[1]), dict(n_draws=5000, n_warmup=500, step=0.08, n_steps=12, seed=2024)

    start = time.perf_counter()
    draws, acceptance = hmc(value_and_gradient, theta0, x, y, PRIOR_SD, **settings)
    first_run = time.perf_counter() - start
    start = time.perf_counter()
    draws, acceptance = hmc(value_and_gradient, theta0, x, y, PRIOR_SD, **settings)
    chain_time = time.perf_counter() - start
    oracle_draws, oracle_acceptance = hmc(analytic_value_and_gradient, theta0, x, y, PRIOR_SD, **settings)
    inputs_unchanged = np.array_equal(x, x_before) and np.array_equal(y, y_before)

    mean_ref, sd_ref, quadrature_change = reference(x, y, PRIOR_SD)
    mean, sd = draws.mean(axis=0), draws.std(axis=0)
    mean_z = np.abs(mean - mean_ref) / batch_means_se(draws)
    # The variance as the mean of (theta - mean_ref)^2, so the same batch-means error applies.
    squared = (draws - mean_ref) ** 2
    var_z = np.abs(squared.mean(axis=0) - sd_ref**2) / batch_means_se(squared)
    chain_difference = float(np.max(np.abs(draws - oracle_draws)))
    gradient_error = float(largest_gradient_error(draws, x, y, PRIOR_SD))

    print(f"HMC, {settings['n_draws']} draws after {settings['n_warmup']} warm-up, {settings['n_steps']} leapfrog "
          f"steps each: acceptance {acceptance:.3f}; {chain_time:.2f} s per chain "
          f"({first_run:.1f} s the first time, compiling)")
    print(f"posterior mean  HMC {np.array2string(mean, precision=4)}  quadrature {np.array2string(mean_ref, precision=4)}"
          f"  |diff| / MC s.e. {np.array2string(mean_z, precision=2)}")
    print(f"posterior sd    HMC {np.array2string(sd, precision=4)}  quadrature {np.array2string(sd_ref, precision=4)}"
          f"  variance |diff| / MC s.e. {np.array2string(var_z, precision=2)}")
    print(f"quadrature: change from a coarser grid {quadrature_change:.1e}")
    print(f"same seed, hand-derived gradient: largest |draw difference| {chain_difference:.1e}, "
          f"acceptance {oracle_acceptance:.3f}; largest relative gradient error over the draws {gradient_error:.1e}")
    return {"mean_z": float(np.max(mean_z)), "var_z": float(np.max(var_z)),
            "mean_error_in_sd": float(np.max(np.abs(mean - mean_ref) / sd_ref)), "acceptance": float(acceptance),
            "acceptance_difference": abs(acceptance - oracle_acceptance), "chain_difference": chain_difference,
            "gradient_error": gradient_error, "quadrature_change": quadrature_change,
            "inputs_unchanged": float(inputs_unchanged), "chain_seconds": chain_time}


if __name__ == "__main__":
    main()
