"""Backward Euler for a stiff ODE, written entirely in Numba, with pyjlad's Jacobian in Newton's method.

Robertson's chemical kinetics (the classic stiff test problem)::

    y1' = -0.04 y1 + 1e4 y2 y3
    y2' =  0.04 y1 - 1e4 y2 y3 - 3e7 y2^2
    y3' =  3e7 y2^2,            y(0) = (1, 0, 0)

Each implicit step solves ``G(z) = z - y - h f(z) = 0`` for ``z`` by Newton's
method; the Jacobian ``dG/dz`` is ``pyjlad.jacrev(residual)``, called from the
``@njit`` integrator like any Numba function (the derivative's machine code is
linked into the integrator: no Python runs inside the loop). The step grows
geometrically, as the solution's fast transient dies out.

The script checks the Jacobian pyjlad computes inside Numba against the
analytic one at every step, and the solution at ``t = 40`` against SciPy's
``solve_ivp(method="Radau")`` at tight tolerance (backward Euler is first order:
the match is to the size of its step's error). Run: ``python examples/backward_euler.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

import pyjlad


@njit
def rhs(y):
    """Robertson's right-hand side."""
    out = np.empty(3)
    out[0] = -0.04 * y[0] + 1.0e4 * y[1] * y[2]
    out[1] = 0.04 * y[0] - 1.0e4 * y[1] * y[2] - 3.0e7 * y[1] * y[1]
    out[2] = 3.0e7 * y[1] * y[1]
    return out


@njit
def residual(z, y, h):
    """Backward Euler's equation for the new state ``z``: ``z - y - h f(z)``."""
    return z - y - h * rhs(z)


jacobian_of_residual = pyjlad.jacrev(residual, wrt=0)  # a function of (z, y, h): dG/dz, 3 x 3


@njit
def analytic_jacobian(z, h):
    """``dG/dz = I - h df/dz``, derived by hand (used only to check pyjlad's)."""
    dfdz = np.array([[-0.04, 1.0e4 * z[2], 1.0e4 * z[1]],
                     [0.04, -1.0e4 * z[2] - 6.0e7 * z[1], -1.0e4 * z[1]],
                     [0.0, 6.0e7 * z[1], 0.0]])
    return np.eye(3) - h * dfdz


@njit
def newton_step(y, h, tol=1e-12, max_iter=50):
    """Solve ``residual(z, y, h) = 0`` from ``z = y``; also the largest Jacobian error seen."""
    z = y.copy()
    worst = 0.0
    for _ in range(max_iter):
        g = residual(z, y, h)
        jac = jacobian_of_residual(z, y, h)
        worst = max(worst, np.max(np.abs(jac - analytic_jacobian(z, h))))
        dz = np.linalg.solve(jac, g)
        z -= dz
        if np.max(np.abs(dz)) <= tol * (1.0 + np.max(np.abs(z))):
            break
    return z, worst


@njit
def integrate(y0, t_end, h0, growth, h_max):
    """Backward Euler from ``t = 0`` to ``t_end``; ``(y(t_end), steps, largest Jacobian error)``."""
    y, t, h, steps, worst = y0.copy(), 0.0, h0, 0, 0.0
    while t < t_end:
        h = min(h, t_end - t, h_max)
        y, err = newton_step(y, h)
        worst = max(worst, err)
        t += h
        h *= growth
        steps += 1
    return y, steps, worst


def reference(y0: np.ndarray, t_end: float) -> np.ndarray:
    """SciPy's Radau at tight tolerance, with the analytic Jacobian of ``f``."""
    from scipy.integrate import solve_ivp

    solution = solve_ivp(lambda t, y: rhs(y), (0.0, t_end), y0, method="Radau", rtol=1e-12, atol=1e-14,
                         jac=lambda t, y: (np.eye(3) - analytic_jacobian(y, 1.0)))
    return solution.y[:, -1]


def main() -> dict[str, float]:
    """Integrate, compare, print; the measured errors (for the test)."""
    y0, t_end = np.array([1.0, 0.0, 0.0]), 40.0
    y, steps, jac_error = integrate(y0, t_end, 1e-6, 1.01, 1e-3)
    ref = reference(y0, t_end)
    rel = float(np.max(np.abs(y - ref) / np.maximum(np.abs(ref), 1e-12)))
    print(f"backward Euler, {steps} steps: y(40) = {y}")
    print(f"Radau (rtol 1e-12):        y(40) = {ref}")
    print(f"largest relative difference: {rel:.2e}; mass conservation |sum(y) - 1| = {abs(y.sum() - 1):.1e}")
    print(f"largest |pyjlad Jacobian - analytic| over all Newton iterations: {jac_error:.1e}")
    return {"relative_error": rel, "jacobian_error": float(jac_error), "mass_error": float(abs(y.sum() - 1.0)),
            "steps": float(steps)}


if __name__ == "__main__":
    main()
